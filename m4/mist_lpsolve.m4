# MIST_CHECK_LPSOLVE: lp_solve 5.5 is required (the inter-stage MILP).
# Debian ships only a static archive, which needs colamd, libm and libdl.
AC_DEFUN([MIST_CHECK_LPSOLVE], [
  AC_CHECK_HEADER([lpsolve/lp_lib.h], [],
    [AC_MSG_ERROR([lp_solve header <lpsolve/lp_lib.h> not found. Hint: apt-get install liblpsolve55-dev])])
  mist_save_LIBS=$LIBS
  AC_CHECK_LIB([lpsolve55], [make_lp], [LPSOLVE_LIBS="-llpsolve55 -lcolamd -lm -ldl"],
    [AC_MSG_ERROR([lp_solve library (liblpsolve55) not found. Hint: apt-get install liblpsolve55-dev libsuitesparse-dev])],
    [-lcolamd -lm -ldl])
  LIBS=$mist_save_LIBS
  AC_SUBST([LPSOLVE_LIBS])
])
