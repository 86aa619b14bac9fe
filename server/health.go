package server

import (
	"fmt"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"time"

	"coord/api"
)

// Probes in the style of Kubernetes' API server: GET /healthz answers "ok"
// while the process serves (a liveness probe: restart the node if it
// fails); GET /readyz answers "ok" only while the node can serve (a
// readiness probe: send it no clients while it fails). A failed readiness
// answers 503 with one line per check, as `?verbose` always does:
//
//	[+]member ok
//	[-]leader failed: no leader known
//	[+]storage ok
//	[+]applied ok
//	readyz check failed
//
// `?exclude=NAME` (repeatable) skips a check.

// ReadyLagEntriesMax is how far this node's applied index may trail the
// leader's commit index (as the leader's last message said it) for
// /readyz to call it caught up. A follower under load trails by a few
// entries; one restoring or far behind trails by thousands.
const ReadyLagEntriesMax = 1000

// readyCheck is one check of /readyz: its name and, if it failed, why.
type readyCheck struct {
	name   string
	failed string
}

// readiness runs the checks of /readyz on what obs says at now.
func readiness(obs observation, now time.Time) []readyCheck {
	st := obs.status
	checks := []readyCheck{{name: "member"}, {name: "leader"}, {name: "storage"}, {name: "applied"}}
	if !slices.ContainsFunc(st.Members, func(m api.Member) bool { return m.ID == st.ID }) {
		checks[0].failed = fmt.Sprintf("node %d is not in the cluster's configuration", st.ID)
	}
	switch {
	case st.Leader == 0:
		checks[1].failed = "no leader known"
	case st.Leader != st.ID && obs.contactMax > 0:
		last, ok := obs.contacts[st.Leader]
		if !ok {
			checks[1].failed = fmt.Sprintf("leader %d was never heard from", st.Leader)
		} else if silent := now.Sub(last); silent > obs.contactMax {
			checks[1].failed = fmt.Sprintf("leader %d silent for %v (over %v)", st.Leader, silent.Round(time.Millisecond), obs.contactMax)
		}
	}
	switch {
	case st.Storage != nil:
		checks[2].failed = "storage failing: " + st.Storage.Error
	case st.LogLost != nil:
		checks[2].failed = fmt.Sprintf("log lost acknowledged entries: it ends at %d, leader %d says %d are committed",
			st.LogLost.LastIndex, st.LogLost.Leader, st.LogLost.Commit)
	}
	if target := max(st.Commit, obs.leaderCommit); st.Applied+ReadyLagEntriesMax < target {
		checks[3].failed = fmt.Sprintf("applied index %d trails the commit index %d by more than %d entries", st.Applied, target, ReadyLagEntriesMax)
	}
	return checks
}

func (a *API) readyz(w http.ResponseWriter, r *request) error {
	exclude := r.URL.Query()["exclude"]
	_, verbose := r.URL.Query()["verbose"]
	var b strings.Builder
	failed := false
	for _, c := range readiness(a.observe(false), time.Now()) {
		switch {
		case slices.Contains(exclude, c.name):
			fmt.Fprintf(&b, "[+]%s excluded: ok\n", c.name)
		case c.failed != "":
			failed = true
			fmt.Fprintf(&b, "[-]%s failed: %s\n", c.name, c.failed)
		default:
			fmt.Fprintf(&b, "[+]%s ok\n", c.name)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	switch {
	case failed:
		w.WriteHeader(http.StatusServiceUnavailable)
		b.WriteString("readyz check failed\n")
		_, err := w.Write([]byte(b.String()))
		return err
	case verbose:
		b.WriteString("readyz check passed\n")
		_, err := w.Write([]byte(b.String()))
		return err
	}
	_, err := w.Write([]byte("ok\n"))
	return err
}

func (a *API) healthz(w http.ResponseWriter, _ *request) error {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, err := w.Write([]byte("ok\n"))
	return err
}

// handleObservability registers the probes, the page and its dashboard,
// and (with APIConfig.Pprof) the profiler.
func (a *API) handleObservability() {
	a.handle("GET /healthz", "healthz", a.healthz)
	a.handle("GET /readyz", "readyz", a.readyz)
	a.handle("GET /v1/dashboard", "dashboard", a.dashboard)
	a.mux.Handle("OPTIONS /v1/dashboard", a.guarded("dashboard_preflight", http.HandlerFunc(a.dashboardPreflight)))
	a.mux.Handle("GET /ui/", a.guarded("ui", a.uiHandler()))
	if a.cfg.Pprof {
		profiles := http.NewServeMux()
		profiles.HandleFunc("/debug/pprof/", pprof.Index)
		profiles.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		profiles.HandleFunc("/debug/pprof/profile", pprof.Profile)
		profiles.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		profiles.HandleFunc("/debug/pprof/trace", pprof.Trace)
		a.mux.Handle("/debug/pprof/", a.guarded("pprof", profiles))
	}
}
