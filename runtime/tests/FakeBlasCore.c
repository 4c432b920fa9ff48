/* Test shim, LD_PRELOADed by runtime.configureBlas.reexec: OpenBLAS reports the
 * generic core it falls back to on CPUs it does not know. */
char *openblas_get_corename(void) {
  static char name[] = "Prescott";
  return name;
}
