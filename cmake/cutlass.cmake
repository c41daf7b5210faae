# CUTLASS (header-only) for the kernels that use it: today the GEMM family's int8 x int8 ->
# bf16/f16/f32 kernel with a scale epilogue (src/ops/gemm/gemm_cutlass_int8*.cu). Included from the
# top-level CMakeLists.txt after add_library(baracuda ...).
#
# Where the headers come from, in order:
#   1. -DBARACUDA_CUTLASS_DIR=<dir>: a directory holding cutlass/cutlass.h (a CUTLASS checkout's
#      include/, or the checkout itself); defaults to $ENV{CUTLASS_DIR} when that is set.
#   2. The nvidia-cutlass PyPI wheel of the Python interpreter CMake finds (Python_EXECUTABLE /
#      Python3_EXECUTABLE when given, e.g. by scikit-build-core): cutlass_library/source/include.
#   3. Not found: the library still builds; the CUTLASS translation units compile to stubs and
#      GemmPlan refuses their variants with "built without CUTLASS". The same happens when
#      BARACUDA_CUDA_ARCHS lacks 90a (the kernels are sm_90a code).
#
# When found: a system include directory and the compile definition BARACUDA_HAVE_CUTLASS=1 on the
# CUTLASS translation units only (src/ops/*/*cutlass*.cu). The headers never reach include/baracuda.
set(_bc_cutlass_default "")
if(DEFINED ENV{CUTLASS_DIR})
  set(_bc_cutlass_default "$ENV{CUTLASS_DIR}")
endif()
set(BARACUDA_CUTLASS_DIR "${_bc_cutlass_default}" CACHE PATH
  "Directory holding cutlass/cutlass.h (empty: ask Python for the nvidia-cutlass wheel)")

set(_bc_cutlass_include "")
set(_bc_cutlass_origin "")
if(BARACUDA_CUTLASS_DIR)
  foreach(cand "${BARACUDA_CUTLASS_DIR}" "${BARACUDA_CUTLASS_DIR}/include")
    if(NOT _bc_cutlass_include AND EXISTS "${cand}/cutlass/cutlass.h")
      set(_bc_cutlass_include "${cand}")
    endif()
  endforeach()
  if(NOT _bc_cutlass_include)
    # An explicit directory that does not hold CUTLASS is a configuration mistake, not a fallback.
    message(FATAL_ERROR "BARACUDA_CUTLASS_DIR=${BARACUDA_CUTLASS_DIR} holds no cutlass/cutlass.h "
                        "(expected the directory above cutlass/, or a checkout with include/cutlass/)")
  endif()
  set(_bc_cutlass_origin "BARACUDA_CUTLASS_DIR")
else()
  set(_bc_py "")
  if(Python_EXECUTABLE)
    set(_bc_py "${Python_EXECUTABLE}")
  elseif(Python3_EXECUTABLE)
    set(_bc_py "${Python3_EXECUTABLE}")
  else()
    find_package(Python3 COMPONENTS Interpreter QUIET)
    if(Python3_Interpreter_FOUND)
      set(_bc_py "${Python3_EXECUTABLE}")
    endif()
  endif()
  if(_bc_py)
    execute_process(
      COMMAND "${_bc_py}" -c "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source'))"
      OUTPUT_VARIABLE _bc_cutlass_src OUTPUT_STRIP_TRAILING_WHITESPACE
      RESULT_VARIABLE _bc_cutlass_rc ERROR_QUIET)
    if(_bc_cutlass_rc EQUAL 0 AND EXISTS "${_bc_cutlass_src}/include/cutlass/cutlass.h")
      set(_bc_cutlass_include "${_bc_cutlass_src}/include")
      set(_bc_cutlass_origin "nvidia-cutlass wheel of ${_bc_py}")
    endif()
  endif()
endif()

if(_bc_cutlass_include AND NOT "90a" IN_LIST BARACUDA_CUDA_ARCHS)
  # The kernels are sm_90a code (WGMMA, TMA); without that target they would be empty.
  message(STATUS "baracuda: CUTLASS found, but BARACUDA_CUDA_ARCHS (${BARACUDA_CUDA_ARCHS}) has no 90a: "
                 "the CUTLASS kernels build as stubs")
  set(_bc_cutlass_include "")
elseif(_bc_cutlass_include)
  # The wheel and a checkout both keep the optional helpers (cutlass/util/...) beside include/.
  set(_bc_cutlass_dirs "${_bc_cutlass_include}")
  get_filename_component(_bc_cutlass_root "${_bc_cutlass_include}" DIRECTORY)
  if(EXISTS "${_bc_cutlass_root}/tools/util/include/cutlass/util")
    list(APPEND _bc_cutlass_dirs "${_bc_cutlass_root}/tools/util/include")
  endif()
  file(STRINGS "${_bc_cutlass_include}/cutlass/version.h" _bc_cutlass_ver REGEX "#define CUTLASS_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE "[^0-9;]" "" _bc_cutlass_ver "${_bc_cutlass_ver}")
  string(REPLACE ";" "." _bc_cutlass_ver "${_bc_cutlass_ver}")
  message(STATUS "baracuda: CUTLASS ${_bc_cutlass_ver} from ${_bc_cutlass_origin}: ${_bc_cutlass_include}")
  # Only the CUTLASS translation units (*cutlass*.cu) see the headers and the define: the other
  # ~140 TUs keep their flags, so finding CUTLASS never invalidates their (ccache) builds.
  file(GLOB _bc_cutlass_tus CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/ops/*/*cutlass*.cu)
  set(_bc_cutlass_opts "")
  foreach(dir IN LISTS _bc_cutlass_dirs)
    list(APPEND _bc_cutlass_opts "-isystem" "${dir}")  # system: their warnings are not ours
  endforeach()
  set_source_files_properties(${_bc_cutlass_tus} PROPERTIES
    COMPILE_DEFINITIONS BARACUDA_HAVE_CUTLASS=1 COMPILE_OPTIONS "${_bc_cutlass_opts}")
elseif(NOT _bc_cutlass_origin)
  message(STATUS "baracuda: CUTLASS not found (pip install nvidia-cutlass, or -DBARACUDA_CUTLASS_DIR=...): "
                 "its kernels build as stubs and their plans refuse with \"built without CUTLASS\"")
endif()
