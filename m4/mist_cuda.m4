# MIST_CHECK_CUDA: the CUDA backend (cudart, cuBLAS, cuBLASLt) and NCCL.
# Default: use /usr/local/cuda when its nvcc exists. The binary still runs on a
# machine without a GPU or driver: the CUDA runtime is linked statically and
# any error from cudaGetDeviceCount means "use the CPU backend".
AC_DEFUN([MIST_CHECK_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=PATH@:>@],
      [build the CUDA backend with the toolkit at PATH (default: /usr/local/cuda when PATH/bin/nvcc exists)])],
    [], [with_cuda=check])
  AC_ARG_WITH([nccl],
    [AS_HELP_STRING([--without-nccl],
      [do not use NCCL even when the CUDA toolkit has it (collectives of GPU memory then go through host memory)])],
    [], [with_nccl=check])
  AC_ARG_WITH([cudnn],
    [AS_HELP_STRING([--without-cudnn],
      [leave out the optional cuDNN attention (MIST_CUDA_ATTENTION=cudnn); only cuDNN's headers are needed to build it, the library is loaded at run time])],
    [], [with_cudnn=check])
  AC_ARG_VAR([CUDA_ARCH], [GPU architecture for nvcc -arch (default: Hopper code with the wgmma attention kernels, sm_90a, plus compute_90 PTX that newer GPUs compile when they load it)])
  AC_ARG_VAR([NVCC], [CUDA compiler (default: PATH/bin/nvcc)])
  AC_ARG_VAR([NVCCFLAGS], [extra flags for nvcc (gcc flags are never passed to nvcc)])
  # The default is a fat binary: sm_90a machine code (Hopper, where [runtime] attention = auto runs
  # the wgmma kernels) and compute_90 PTX, which the driver compiles for GPUs after Hopper (there the
  # wgmma kernels are absent and auto runs base). sm_90a code alone would not load on them.
  AS_IF([test "x$CUDA_ARCH" = x],
    [CUDA_ARCH=sm_90a+compute_90
     NVCC_ARCH_FLAGS="-gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90"],
    [NVCC_ARCH_FLAGS="-arch=$CUDA_ARCH"])
  AC_SUBST([NVCC_ARCH_FLAGS])
  mist_have_cuda=no
  mist_have_nccl=no
  mist_have_cudnn=no
  AS_CASE([$with_cuda],
    [no], [],
    [yes|check], [CUDA_HOME=/usr/local/cuda],
    [CUDA_HOME=$with_cuda])
  AS_IF([test "x$with_cuda" != xno], [
    AS_IF([test "x$NVCC" = x], [NVCC=$CUDA_HOME/bin/nvcc])
    AC_MSG_CHECKING([for nvcc])
    AS_IF([test -x "$NVCC"], [
      AC_MSG_RESULT([$NVCC])
      mist_save_CPPFLAGS=$CPPFLAGS; mist_save_LIBS=$LIBS; mist_save_LDFLAGS=$LDFLAGS
      CPPFLAGS="$CPPFLAGS -I$CUDA_HOME/include"
      LDFLAGS="$LDFLAGS -L$CUDA_HOME/lib64"
      mist_have_cuda=yes
      AC_CHECK_HEADERS([cuda_runtime_api.h cublasLt.h], [], [mist_have_cuda=no])
      AC_CHECK_LIB([cublasLt], [cublasLtCreate], [], [mist_have_cuda=no])
      AC_CHECK_LIB([cublas], [cublasCreate_v2], [], [mist_have_cuda=no])
      AS_IF([test "x$mist_have_cuda" = xyes && test "x$with_nccl" != xno], [
        AC_CHECK_HEADER([nccl.h], [AC_CHECK_LIB([nccl], [ncclCommInitRank], [mist_have_nccl=yes])])])
      AS_IF([test "x$mist_have_cuda" = xyes && test "x$with_cudnn" != xno], [
        AC_CHECK_HEADER([cudnn_graph.h], [mist_have_cudnn=yes])])
      CPPFLAGS=$mist_save_CPPFLAGS; LIBS=$mist_save_LIBS; LDFLAGS=$mist_save_LDFLAGS
    ], [AC_MSG_RESULT([no])])
    AS_IF([test "x$mist_have_cuda" = xno && test "x$with_cuda" != xcheck],
      [AC_MSG_ERROR([CUDA requested (--with-cuda=$with_cuda) but nvcc, cuBLAS or cuBLASLt not found under $CUDA_HOME. Hint: pass --with-cuda=PATH to the toolkit, or --without-cuda])])
  ])
  AS_IF([test "x$with_nccl" = xyes && test "x$mist_have_nccl" = xno],
    [AC_MSG_ERROR([NCCL requested (--with-nccl) but the CUDA backend is not built or nccl.h / libnccl are not under its toolkit ($CUDA_HOME). Hint: --with-cuda=PATH to a toolkit with NCCL in include/ and lib64/, or --without-nccl])])
  AS_IF([test "x$mist_have_cuda" = xyes], [
    AC_DEFINE([HAVE_CUDA], [1], [Define when the CUDA backend is built.])
    CUDA_CFLAGS="-I$CUDA_HOME/include"
    CUDA_LIBS="-L$CUDA_HOME/lib64 -Wl,-rpath,$CUDA_HOME/lib64 -lcublasLt -lcublas -lcudart_static -ldl -lpthread -lrt -lstdc++"
    AS_IF([test "x$mist_have_nccl" = xyes], [
      AC_DEFINE([HAVE_NCCL], [1], [Define when NCCL is available.])
      CUDA_LIBS="$CUDA_LIBS -lnccl"])
  ], [CUDA_HOME=; NVCC=])
  AS_IF([test "x$with_cudnn" = xyes && test "x$mist_have_cudnn" = xno],
    [AC_MSG_ERROR([cuDNN requested (--with-cudnn) but cudnn_graph.h is not under $CUDA_HOME/include. Hint: install cuDNN 9's headers there, or --without-cudnn])])
  # kernels/cuda/cudnn_graph.cuh also checks for the header itself (builds without configure)
  AS_IF([test "x$mist_have_cudnn" = xno], [CUDNN_NVCCFLAGS=-DMIST_NO_CUDNN], [CUDNN_NVCCFLAGS=])
  AC_SUBST([CUDNN_NVCCFLAGS])
  AC_SUBST([CUDA_HOME])
  AC_SUBST([CUDA_CFLAGS])
  AC_SUBST([CUDA_LIBS])
  AM_CONDITIONAL([HAVE_CUDA], [test "x$mist_have_cuda" = xyes])
  AM_CONDITIONAL([HAVE_NCCL], [test "x$mist_have_nccl" = xyes])
])
