# Finds every external dependency; a missing one stops configuration with the apt package to install.

macro(nmt_require found what package)
  if(NOT ${found})
    message(FATAL_ERROR "${what} not found: install the Debian/Ubuntu package '${package}' "
                        "(scripts/install-deps.sh installs all of them).")
  endif()
endmacro()

find_package(CUDAToolkit)
nmt_require(CUDAToolkit_FOUND "CUDA toolkit"
            "the NVIDIA CUDA toolkit (cuda-toolkit, see README: it is a prerequisite)")
foreach(lib cudart cublas cublasLt)
  if(NOT TARGET CUDA::${lib})
    message(FATAL_ERROR "CUDA library ${lib} not found in the CUDA toolkit at ${CUDAToolkit_LIBRARY_DIR}")
  endif()
endforeach()

find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include /usr/include)
find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64
             /usr/lib/x86_64-linux-gnu)
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  set(NCCL_FOUND TRUE)
endif()
nmt_require(NCCL_FOUND "NCCL" "libnccl-dev (from NVIDIA's CUDA repository)")
add_library(nmt_nccl INTERFACE)
target_include_directories(nmt_nccl INTERFACE ${NCCL_INCLUDE_DIR})
target_link_libraries(nmt_nccl INTERFACE ${NCCL_LIBRARY})

find_package(MPI COMPONENTS CXX)
nmt_require(MPI_CXX_FOUND "MPI (C++)" "libopenmpi-dev openmpi-bin")

find_package(CLI11 CONFIG)
nmt_require(CLI11_FOUND "CLI11" "libcli11-dev")

find_package(nlohmann_json 3.10 CONFIG)
nmt_require(nlohmann_json_FOUND "nlohmann-json" "nlohmann-json3-dev")

find_package(Catch2 CONFIG)
nmt_require(Catch2_FOUND "Catch2" "catch2")
string(REGEX MATCH "^[0-9]+" NMT_CATCH2_MAJOR "${Catch2_VERSION}")

find_package(PkgConfig)
if(PkgConfig_FOUND)
  pkg_check_modules(SENTENCEPIECE IMPORTED_TARGET sentencepiece)
endif()
if(NOT SENTENCEPIECE_FOUND)
  find_path(SENTENCEPIECE_INCLUDE_DIR sentencepiece_processor.h)
  find_library(SENTENCEPIECE_LIB sentencepiece)
  find_library(SENTENCEPIECE_TRAIN_LIB sentencepiece_train)
  if(SENTENCEPIECE_INCLUDE_DIR AND SENTENCEPIECE_LIB AND SENTENCEPIECE_TRAIN_LIB)
    set(SENTENCEPIECE_FOUND TRUE)
  endif()
endif()
nmt_require(SENTENCEPIECE_FOUND "SentencePiece" "libsentencepiece-dev")
find_library(SENTENCEPIECE_TRAIN_LIBRARY sentencepiece_train)
nmt_require(SENTENCEPIECE_TRAIN_LIBRARY "SentencePiece trainer library" "libsentencepiece-dev")
add_library(nmt_sentencepiece INTERFACE)
if(TARGET PkgConfig::SENTENCEPIECE)
  target_link_libraries(nmt_sentencepiece INTERFACE PkgConfig::SENTENCEPIECE)
else()
  target_include_directories(nmt_sentencepiece INTERFACE ${SENTENCEPIECE_INCLUDE_DIR})
  target_link_libraries(nmt_sentencepiece INTERFACE ${SENTENCEPIECE_LIB})
endif()
target_link_libraries(nmt_sentencepiece INTERFACE ${SENTENCEPIECE_TRAIN_LIBRARY})

find_package(OpenMP COMPONENTS CXX)
