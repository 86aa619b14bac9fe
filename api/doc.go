// Package api is coord's HTTP/JSON API as Go types: every request and
// response body, error code, header and query parameter that the cluster
// server (package server) serves and the Go client (package client)
// sends. docs/API.md describes the routes and what they do.
//
// The package is a leaf: it imports only the standard library's
// encoding/json and net/http (for status codes), so that a program that
// uses the client, or raft:// leases, links neither the server nor the
// Raft core, the write-ahead log, the TCP transport or prometheus (etcd
// keeps its api/ apart from client/ and server/ for the same reason). A
// test checks it.
//
// Field names and JSON tags are the wire format: renaming one breaks
// every client. Optional numbers whose zero means something (a conflict
// on an absent key reports revision 0) are pointers, so that "absent" and
// "zero" stay apart.
package api
