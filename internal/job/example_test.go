package job_test

import (
	"fmt"
	"os"

	"coord/internal/job"
)

// A job runs under a shim (here this test binary, see TestMain); its exit
// status comes back once every process it started is gone.
func Example() {
	path, err := job.LookPath("sh")
	if err != nil {
		fmt.Println(err)
		return
	}
	j, err := job.Start(job.Config{
		Path:   path,
		Args:   []string{"sh", "-c", "(setsid sleep 600 &); echo hello; exit 3"},
		Stdout: os.Stdout,
		Shim:   []string{"/proc/self/exe", "job-init"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	st := j.Wait() // the setsid sleep is dead too
	fmt.Println("exit", st.Code)
	// Output:
	// hello
	// exit 3
}
