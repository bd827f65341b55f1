# LibTorch from the pinned PyTorch wheel in the project's virtual environment (scripts/setup.sh
# installs torch==2.11.0, built for CUDA 13, into .venv). Its prefix comes from
# torch.utils.cmake_prefix_path, so the C++ build, the parity reference and the Python test helpers
# all use one torch. Defines:
#   ringtrain_libtorch   INTERFACE target every LibTorch user links: libtorch_cpu + libc10 in the
#                        CPU build; in the CUDA build (RINGTRAIN_CUDA) also libtorch_cuda,
#                        libc10_cuda and NCCL (headers and libnccl.so.2 of the wheel's nvidia-nccl).
#   RINGTRAIN_TORCH_VERSION, RINGTRAIN_TORCH_LIB_DIR.
#
# Include this before find_package(Protobuf): the wheel links protobuf statically and its CMake
# config then makes protobuf::libprotobuf an empty alias, so that LibTorch users (the trainer) never
# link Debian's libprotobuf. The gRPC side links Protobuf_LIBRARIES explicitly (proto/).
set(RINGTRAIN_PYTHON "${CMAKE_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH
    "Python of the project's virtual environment: its torch is the build's LibTorch and the tests' reference")

execute_process(
  COMMAND "${RINGTRAIN_PYTHON}" -c
          "import torch, torch.utils; print(torch.utils.cmake_prefix_path); print(torch.__version__)"
  OUTPUT_VARIABLE _ringtrain_torch_out ERROR_VARIABLE _ringtrain_torch_err
  RESULT_VARIABLE _ringtrain_torch_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _ringtrain_torch_rc EQUAL 0)
  message(FATAL_ERROR "cannot import torch with RINGTRAIN_PYTHON=${RINGTRAIN_PYTHON}:\n"
          "${_ringtrain_torch_err}\nHINT: run scripts/setup.sh (it installs the pinned torch into "
          ".venv), or pass -DRINGTRAIN_PYTHON=/path/to/python of an environment that has it.")
endif()
string(REPLACE "\n" ";" _ringtrain_torch_out "${_ringtrain_torch_out}")
list(GET _ringtrain_torch_out 0 _ringtrain_torch_prefix)
list(GET _ringtrain_torch_out 1 RINGTRAIN_TORCH_VERSION)
# The torch package folder too, so that the find_library calls inside TorchConfig.cmake (libtorch,
# libc10) look in its lib/ before the system's: a LibTorch installed elsewhere (Debian's
# libtorch-dev) is never mixed in.
get_filename_component(_ringtrain_torch_root "${_ringtrain_torch_prefix}/../.." ABSOLUTE)
list(PREPEND CMAKE_PREFIX_PATH "${_ringtrain_torch_prefix}" "${_ringtrain_torch_root}")
# The wheel's CMake config needs the CUDA toolkit (nvcc, headers) even for a CPU-only consumer.
find_package(Torch REQUIRED)
# Only for that: the wheel also ships an old protoc and protobuf headers (torch/bin, torch/include),
# which find_package(Protobuf) must not pick over Debian's.
list(REMOVE_ITEM CMAKE_PREFIX_PATH "${_ringtrain_torch_root}")
set(RINGTRAIN_TORCH_LIB_DIR "${_ringtrain_torch_root}/lib")
foreach(_ringtrain_lib IN ITEMS TORCH_LIBRARY c10_LIBRARY)
  get_filename_component(_ringtrain_dir "${${_ringtrain_lib}}" DIRECTORY)
  if(NOT _ringtrain_dir STREQUAL RINGTRAIN_TORCH_LIB_DIR)
    message(FATAL_ERROR "${_ringtrain_lib} is ${${_ringtrain_lib}}, not in ${RINGTRAIN_TORCH_LIB_DIR}: "
            "another LibTorch is in the way. HINT: start from a fresh build folder.")
  endif()
endforeach()
message(STATUS "LibTorch ${RINGTRAIN_TORCH_VERSION} from ${RINGTRAIN_TORCH_LIB_DIR}")

add_library(ringtrain_libtorch INTERFACE)
target_include_directories(ringtrain_libtorch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
if(TORCH_CXX_FLAGS)
  separate_arguments(_ringtrain_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  target_compile_options(ringtrain_libtorch INTERFACE ${_ringtrain_torch_flags})
endif()
if(NOT RINGTRAIN_CUDA)
  target_link_libraries(ringtrain_libtorch INTERFACE torch_cpu c10)
  return()
endif()

# The CUDA build: every CUDA library LibTorch's config names, and NCCL from the wheel's
# nvidia-nccl package — the NCCL that libtorch_cuda.so loads at run time — with the toolkit's
# as the fallback.
get_filename_component(_ringtrain_site "${_ringtrain_torch_root}/.." ABSOLUTE)
find_path(RINGTRAIN_NCCL_INCLUDE_DIR nccl.h
          HINTS "${_ringtrain_site}/nvidia/nccl/include" "${CUDAToolkit_INCLUDE_DIRS}"
          NO_DEFAULT_PATH)
find_library(RINGTRAIN_NCCL_LIBRARY NAMES libnccl.so.2 nccl NAMES_PER_DIR
             HINTS "${_ringtrain_site}/nvidia/nccl/lib" "${CUDAToolkit_LIBRARY_DIR}"
             NO_DEFAULT_PATH)
if(NOT RINGTRAIN_NCCL_INCLUDE_DIR OR NOT RINGTRAIN_NCCL_LIBRARY)
  message(FATAL_ERROR "RINGTRAIN_CUDA: NCCL not found (nccl.h and libnccl.so.2 under "
          "${_ringtrain_site}/nvidia/nccl or the CUDA toolkit)")
endif()
message(STATUS "NCCL: ${RINGTRAIN_NCCL_LIBRARY} (headers ${RINGTRAIN_NCCL_INCLUDE_DIR})")
target_include_directories(ringtrain_libtorch SYSTEM INTERFACE "${RINGTRAIN_NCCL_INCLUDE_DIR}")
target_link_libraries(ringtrain_libtorch INTERFACE ${TORCH_LIBRARIES} "${RINGTRAIN_NCCL_LIBRARY}")
target_compile_definitions(ringtrain_libtorch INTERFACE USE_C10D_NCCL RINGTRAIN_WITH_CUDA)
