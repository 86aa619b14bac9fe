package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coord/client"
	"coord/internal/leasekit/leasekittest"
	"coord/server/localcluster"
)

// TestSecureClusterUp is the outsider's and the user's view of a cluster
// started with defaults: curl without the CA cannot connect, with the CA
// but no token it gets 401, and with the exports of coord cluster env it
// works. Tokens made with coord auth are limited as asked, and a revoked
// one is refused by every node.
func TestSecureClusterUp(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv(leasekittest.RequireServersEnv) != "" {
			t.Fatalf("curl is not installed, and %s is set (scripts/test.sh installs it)", leasekittest.RequireServersEnv)
		}
		t.Skip("curl is not installed")
	}
	dir := t.TempDir()
	t.Cleanup(func() { _, _ = localcluster.Down(dir) })
	must := func(args ...string) (string, string) {
		t.Helper()
		code, out, stderr := runCLI(t, args...)
		if code != exitOK {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, stderr)
		}
		return out, stderr
	}
	must("cluster", "up", "--detach", "--dir", dir, "--tick", "20ms")
	for _, f := range []string{"ca.crt", "ca.key", "client.crt", "client.key", "node-1.crt", "node-1.key", "admin.token"} {
		st, err := os.Stat(filepath.Join(dir, "tls", f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("tls/%s: %v %v, want mode 0600", f, st.Mode(), err)
		}
	}
	env, _ := must("cluster", "env", "--dir", dir)
	info, err := localcluster.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ep := info.Nodes[0].HTTP
	sh := func(script string) string {
		t.Helper()
		out, _ := exec.Command("bash", "-c", script).CombinedOutput() // the exit status is in the output
		return string(out)
	}
	curlCode := curl + " -s -o /dev/null -w '%{http_code} exit=%{exitcode}' --max-time 20"
	if out := sh(curlCode + " https://" + ep + "/v1/kv/greeting; echo \" $?\""); !strings.Contains(out, " 60") {
		t.Errorf("curl without the CA: %q, want exit 60 (certificate not trusted)", out)
	}
	if out := sh(curlCode + " --cacert " + info.Security.CA + " https://" + ep + "/v1/kv/greeting"); !strings.HasPrefix(out, "401") {
		t.Errorf("curl with the CA and no token: %q, want 401", out)
	}
	withEnv := env + "\n" + curlCode + ` --cacert "$COORD_CACERT" -H "Authorization: Bearer $COORD_TOKEN" `
	if out := sh(withEnv + "-X PUT --data hello https://" + ep + "/v1/kv/greeting"); !strings.HasPrefix(out, "200") {
		t.Fatalf("curl with coord cluster env's exports: %q, want 200", out)
	}

	// coord's own commands read the same variables.
	for _, kv := range strings.Split(strings.TrimSpace(env), "\n") {
		name, value, _ := strings.Cut(strings.TrimPrefix(kv, "export "), "=")
		t.Setenv(name, strings.Trim(value, "'"))
	}
	status, _ := must("cluster", "status")
	if !strings.Contains(status, "https://"+ep) || !strings.Contains(status, "leader") {
		t.Fatalf("status from the environment:\n%s", status)
	}
	secret, desc := must("auth", "token", "create", "--role", "read", "--prefix", "app/", "--name", "ro")
	secret = strings.TrimSpace(secret)
	if !strings.HasPrefix(secret, "coord_") || !strings.Contains(desc, "role read") {
		t.Fatalf("create printed %q and %q", secret, desc)
	}
	list, _ := must("auth", "token", "list")
	if !strings.Contains(list, "initial admin") || !strings.Contains(list, `"app/"`) || strings.Contains(list, secret) {
		t.Fatalf("list:\n%s", list)
	}
	asReader := curlCode + " --cacert " + info.Security.CA + " -H 'Authorization: Bearer " + secret + "' "
	if out := sh(asReader + "-X PUT --data x https://" + ep + "/v1/kv/app/x"); !strings.HasPrefix(out, "403") {
		t.Errorf("a read token writing: %q, want 403", out)
	}
	if out := sh(asReader + "https://" + ep + "/v1/kv/greeting"); !strings.HasPrefix(out, "403") {
		t.Errorf("an app/ token reading greeting: %q, want 403", out)
	}
	if out := sh(asReader + "https://" + ep + "/v1/kv/app/x"); !strings.HasPrefix(out, "404") {
		t.Errorf("an app/ token reading app/x: %q, want 404 (allowed, absent)", out)
	}
	id := tokenID(t, list, "ro")
	revoked, _ := must("auth", "token", "revoke", id)
	if !strings.Contains(revoked, "revoked token "+id) {
		t.Fatalf("revoke: %s", revoked)
	}
	// Every node refuses it, stale reads included, once it applied the
	// revocation: wait for that, then ask each.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	acc, err := info.Security.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range info.Nodes {
		cfg := acc.ClientConfig(n.HTTP)
		cfg.Token = secret
		cl, err := client.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for {
			_, err := cl.Get(ctx, "app/x", client.Stale())
			if errors.Is(err, client.ErrUnauthenticated) {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("node %d still serves a revoked token: %v", n.ID, err)
			}
			time.Sleep(20 * time.Millisecond) // another process applies the revocation: nothing to wait on but its answers
		}
	}
}

// tokenID finds the id of the token named name in coord auth token list's
// output.
func tokenID(t *testing.T, list, name string) string {
	t.Helper()
	for _, line := range strings.Split(list, "\n") {
		f := strings.Fields(line)
		if len(f) == 5 && f[4] == name {
			return f[0]
		}
	}
	t.Fatalf("no token %q in:\n%s", name, list)
	return ""
}
