/* Test plugins for runtime.pipemesh-run.backend_plugins: each is wrong in one way
 * that pipemesh-run's plugin loader (runtime/lib/exec/Backend.cpp) must name.
 *   FAKE_STALE       built by another build (another build id)
 *   FAKE_SILENT      this build's id, but registers no backend
 *   FAKE_UNRESOLVED  calls a function pipemesh-run does not have (a missing library
 *                    looks the same to dlopen)
 *   (none)           no entry points at all */
#if defined(FAKE_STALE)
const char *pipemesh_backend_build_id(void) { return "another-build"; }
void pipemesh_register_backend(void) {}
#elif defined(FAKE_SILENT)
const char *pipemesh_backend_build_id(void) { return PIPEMESH_BUILD_ID; }
void pipemesh_register_backend(void) {}
#elif defined(FAKE_UNRESOLVED)
void pipemesh_function_no_pipemesh_run_has(void);
const char *pipemesh_backend_build_id(void) { return PIPEMESH_BUILD_ID; }
void pipemesh_register_backend(void) { pipemesh_function_no_pipemesh_run_has(); }
#else
int not_a_backend_plugin(void) { return 0; }
#endif
