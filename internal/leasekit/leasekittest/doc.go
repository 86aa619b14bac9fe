// Package leasekittest holds the test scaffolding that coord's lease
// backends share beside the conformance suite (lease/leasetest, whose
// faults.go has the fault checks), so that each backend's tests say only
// what is particular to it (its command lines, its URLs):
//
//   - finding the test server (ServerURL, skipped or failed when missing)
//     and lease names unique to a test (Name);
//   - a TestMain that builds the coord command for leasetest.RunProcesses
//     (MainWithCoord);
//   - Backends closed when the test ends (Open), Backends reached through a
//     fault proxy (Proxied), and the checks every networked backend runs
//     against cut connections and partitions (RunFaults);
//   - a server process of the test's own, to crash and restart on the same
//     port and data (StartServer, Server, FreePort, LookPath).
//
// A backend's restart test reads:
//
//	port := leasekittest.FreePort(t)
//	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
//	s := leasekittest.StartServer(t, leasekittest.ServerOptions{Port: port},
//		leasekittest.LookPath(t, "COORD_TEST_REDIS", "redis-server"), "--port", strconv.Itoa(port), ...)
//	b := leasekittest.Open(t, url)
//	... // acquire
//	s.Kill()
//	... // every operation fails with lease.ErrUnavailable
//	s.Restart()
//	... // the holder renews; the next token is greater
package leasekittest
