// Package pki is coord's use of crypto/tls and crypto/x509: who a
// certificate names, a small certificate authority for local clusters,
// certificate files that reload while a node runs, and the TLS
// configurations of the peer transport, the HTTPS API and its clients.
// It holds no cryptography of its own: keys are ECDSA P-256 from
// crypto/ecdsa, certificates are made and verified by crypto/x509, and
// connections are crypto/tls at version 1.3.
//
// # Identities
//
// A certificate names who holds it with exactly one URI subject
// alternative name:
//
//	coord://CLUSTER/node/ID      a node of cluster CLUSTER (peer transport)
//	coord://CLUSTER/client/NAME  a client of cluster CLUSTER
//
// CLUSTER is the cluster id, 1 to 63 of [a-z0-9-]. A node takes its own
// cluster id from its own peer certificate, and accepts on the peer port
// only certificates that name a node of the same cluster; the transport
// then checks that the node a connection's hello claims to be is the one
// its certificate names. A client certificate, even one from the same CA,
// is refused on the peer port.
//
// # Files
//
// Certificates, keys and CA bundles are PEM files. A Source loads one
// certificate and key and one CA bundle, and loads them again on Reload
// (a node calls it on SIGHUP) or when a file changes (Watch): a failed
// reload keeps the material it had and says why. Connections made before
// a reload keep the certificates they were made with.
package pki
