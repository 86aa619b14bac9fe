//go:build !linux

package main

// writerCommand and writerMain stand in for the coord run trials' job
// writer (run_trials_test.go), which needs Linux, so that TestMain builds.
const writerCommand = "run-writer"

func writerMain([]string) int { return 2 }

// coordBuild stands in for run_test.go's built binary, which TestMain
// removes.
var coordBuild struct{ dir string }
