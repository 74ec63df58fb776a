# Read by CMake before natten's own CMakeLists (CMAKE_TOOLCHAIN_FILE in build_env): presets the
# C++ standard cache variable that natten otherwise defaults to 17.
set(CXX_STD "20" CACHE STRING "C++ standard")
