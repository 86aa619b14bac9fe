// Package processes holds the lab's process-level experiments (Part 2 of the
// Coordination series): exclusive-create, failover, empty-file,
// takeover-race and paused-leader.
//
// Every participant is a real OS process: the coord binary re-executing
// itself. The articles' programs run as `coord articles ...` (package
// lab/articles, bugs included); coord's side runs as `coord elect` over the
// file backend (lease/file), or as a lab child built on package lease where
// an experiment needs a one-shot acquire or a leader that writes to a fenced
// resource. Participants print one JSON event per line (lease.Event), stamped
// with CLOCK_MONOTONIC, so that one timeline orders the events of all
// processes and the lab's own signals.
//
// Linux only (//go:build linux): the experiments run coord's side on the
// file store (lease/file) and freeze, kill and time processes with Linux's
// facilities. Elsewhere the package is empty and the lab has no process
// experiments.
//
// Importing the package registers its experiments with package lab.
package processes
