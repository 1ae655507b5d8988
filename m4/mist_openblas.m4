# MIST_CHECK_OPENBLAS: OpenBLAS speeds up the CPU backend's matmuls; without it
# the CPU backend uses its own blocked loops.
AC_DEFUN([MIST_CHECK_OPENBLAS], [
  AC_ARG_WITH([openblas],
    [AS_HELP_STRING([--with-openblas], [use OpenBLAS for CPU matmuls (default: when found by pkg-config)])],
    [], [with_openblas=check])
  mist_have_openblas=no
  AS_IF([test "x$with_openblas" != xno], [
    PKG_CHECK_MODULES([OPENBLAS], [openblas], [mist_have_openblas=yes], [
      AS_IF([test "x$with_openblas" = xyes],
        [AC_MSG_ERROR([OpenBLAS requested but not found. Hint: apt-get install libopenblas-dev])])])])
  AS_IF([test "x$mist_have_openblas" = xyes],
    [AC_DEFINE([HAVE_OPENBLAS], [1], [Define when OpenBLAS (cblas) is available.])],
    [OPENBLAS_CFLAGS=; OPENBLAS_LIBS=])
  AC_SUBST([OPENBLAS_CFLAGS])
  AC_SUBST([OPENBLAS_LIBS])
  AM_CONDITIONAL([HAVE_OPENBLAS], [test "x$mist_have_openblas" = xyes])
])
