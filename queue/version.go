package queue

import "runtime/debug"

// workerVersion is the version a worker reports in its heartbeat: env's
// (VIGIL_VERSION), else its binary's main module version from the build
// info ("(devel)" for a build outside a module version), else "".
func workerVersion(env string) string {
	if env != "" {
		return env
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.Main.Version
	}
	return ""
}
