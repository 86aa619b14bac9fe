// Package leasemetrics exposes one lease participant's state as Prometheus
// metrics, as client-go's leaderelection does with its
// leader_election_master_status, and more: whether it leads, how often it
// was elected and lost the lease, how long each acquire and renew took at
// the store, how long ago the last one succeeded, and the fencing token of
// its tenure.
//
// A Metrics wraps the two seams of an Elector: the Backend (Backend times
// every Acquire and Renew) and the Callbacks (Callbacks records each event
// before passing it on). `coord elect --metrics-addr` and `coord run
// --metrics-addr` serve Handler.
//
// Metrics (every one has a lease label naming the lease):
//
//	coord_elector_is_leader                      1 while this participant holds the lease, else 0
//	coord_elector_elected_total                  tenures begun
//	coord_elector_lost_total{reason}             tenures ended other than by resigning:
//	                                             reason "lost" (the store gave the lease to another)
//	                                             or "deadline" (no renewal within the renew deadline)
//	coord_elector_released_total                 tenures ended by resigning
//	coord_elector_leader_changes_total           changes of the observed holder, to anyone
//	coord_elector_token                          the fencing token of this participant's tenure, 0 when not leading
//	coord_elector_observed_token                 the token of the holder last observed, anyone's
//	coord_elector_lease_expiry_timestamp_seconds when the tenure held expires unless renewed (this clock), 0 when not leading
//	coord_elector_last_renew_timestamp_seconds   when the last successful acquire or renew was sent, 0 if none
//	coord_elector_seconds_since_last_renew       seconds since then, at the scrape (+Inf if none)
//	coord_elector_renew_seconds{result}          histogram of Renew calls at the store: result ok, lost or error
//	coord_elector_acquire_seconds{result}        histogram of Acquire calls: result ok, held or error
//	coord_elector_info{holder,store}             1, naming this participant and the store's URL scheme
//
// plus the Go runtime's and the process's standard collectors.
package leasemetrics
