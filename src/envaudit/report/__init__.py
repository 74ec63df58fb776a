"""Read result lines and present them: console summaries now; merged reports later."""
