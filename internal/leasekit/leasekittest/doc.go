// Package leasekittest holds the test scaffolding that coord's lease
// backends share beside the conformance suite (lease/leasetest, whose
// faults.go has the fault checks), so that each backend's tests say only
// what is particular to it (its command lines, its URLs):
//
//   - finding the test server (ServerURL, skipped or failed when missing)
//     and lease names unique to a test (Name);
//   - a TestMain that builds the coord command for leasetest.RunProcesses
//     (MainWithCoord);
//   - Backends closed when the test ends (Open), store URLs that must not
//     open (OpenFails), Backends reached through a fault proxy (Proxied),
//     and the checks every networked backend runs against cut connections
//     and partitions (RunFaults);
//   - a server process of the test's own, to crash and restart on the same
//     port and data (StartServer, Server, FreePort, LookPath), and the check
//     that a lease survives such a restart (RestartKeepsLease).
//
// A backend's restart test reads:
//
//	port := leasekittest.FreePort(t)
//	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
//	bin := leasekittest.LookPath(t, "COORD_TEST_REDIS", "redis-server")
//	s := leasekittest.StartServer(t, leasekittest.ServerOptions{Port: port}, bin,
//		"--port", strconv.Itoa(port), "--dir", t.TempDir(), "--appendonly", "yes", "--appendfsync", "always")
//	leasekittest.RestartKeepsLease(t, s, leasekittest.Open(t, url), reconnect)
//
// where reconnect retries the holder's Renew as the backend's client needs
// while it reconnects.
package leasekittest
