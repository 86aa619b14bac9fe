// Command coord runs the coordination lab, elects leaders over swappable
// lease stores, and serves a Raft cluster.
//
// The command is a thin shell over the library packages: each group of
// subcommands lives in its own file (lab.go, elect.go, run.go, ...) and turns
// flags into library calls. Errors map to exit codes in one place (main.go):
// 0 success, 1 failure, 2 usage error (unknown command or flag, bad value).
//
// Usage:
//
//	coord lab                       run every experiment in quick mode
//	coord elect --store file:///tmp/leader.lock
//	coord run --store URL -- CMD [ARGS...]
//	coord server --id 1 --peers 1=ADDR,2=ADDR,3=ADDR --data DIR
//	coord cluster up
//	coord sim --seeds 100
//	coord bench failover
//	coord version
package main
