package file

import (
	"os"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// testStopEnv names the environment variable through which tests of real
// processes freeze one at a chosen instant: COORD_FILE_TEST_STOP=before-commit
// makes the process stop itself (SIGSTOP) the first time it reaches that
// point, between reading a record and linking the next version, the
// instant at which a frozen process would block everyone if the backend
// took a lock there. Nothing else reads it; unset, testHook does nothing.
const testStopEnv = "COORD_FILE_TEST_STOP"

var (
	testStopAt   = os.Getenv(testStopEnv)
	testStopOnce sync.Once
	// testHookFunc, set only by this package's in-process tests, runs at
	// every hook point.
	testHookFunc func(point string)
)

// testHook stops the process at point if the test asked for it (see
// testStopEnv), once per process, and runs testHookFunc if set.
func testHook(point string) {
	if testHookFunc != nil {
		testHookFunc(point)
	}
	if testStopAt != point {
		return
	}
	testStopOnce.Do(func() {
		// To this thread, not to the process: a process-directed stop is
		// taken by whichever thread the kernel picks, and this one could
		// run on for milliseconds (and link its record) before it stops.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		unix.Tgkill(os.Getpid(), unix.Gettid(), syscall.SIGSTOP)
	})
}
