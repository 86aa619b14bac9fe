package server

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// newDirNode starts a one-node cluster on dir and returns its config, for
// restarting; it stops the node before returning.
func newDirNode(t *testing.T, dir string) Config {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ID, cfg.DataDir, cfg.Logger = 1, dir, quiet
	cfg.PeerListener = freeListener(t)
	cfg.Peers = map[uint64]string{1: cfg.PeerListener.Addr().String()}
	cfg.TickInterval = 10 * time.Millisecond
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(30 * time.Second)
	for {
		changed := n.StatusChanged()
		if n.Status().Leader == 1 {
			break
		}
		if !waitAny([]<-chan struct{}{changed}, deadline) {
			t.Fatal("no leader within 30s")
		}
	}
	if _, err := n.Propose(ctx(t), Command{Op: OpPut, Key: "k", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.PeerListener = nil
	return cfg
}

// restartOn starts the node of cfg again (on a fresh listener) and returns
// the error, closing the node if it started.
func restartOn(t *testing.T, cfg Config) error {
	t.Helper()
	cfg.PeerListener = freeListener(t)
	n, err := NewNode(cfg)
	if err == nil {
		n.Close()
	}
	return err
}

// A data directory records whose it is; a node refuses one that lost its
// log or its identity, or that is another node's or cluster's, with an
// error saying what is wrong and how to recover, and changes nothing in it
// but the torn last segment the WAL repairs before the refusal.
func TestDataDirectoryIdentity(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, cfg *Config)
		text   string // "" means the node starts
		// repaired is the one file a refused start may change: the WAL's
		// repair of a torn last segment runs before the refusal.
		repaired string
	}{
		{"restart as is", func(*testing.T, *Config) {}, "", ""},
		{"another node id", func(_ *testing.T, cfg *Config) {
			cfg.ID = 2
			cfg.Peers = map[uint64]string{2: "127.0.0.1:1"}
		}, "belongs to another node (node 1 of cluster", ""},
		{"another cluster", func(_ *testing.T, cfg *Config) { cfg.ClusterID = 0xabc }, "belongs to another cluster", ""},
		{"identity deleted", func(t *testing.T, cfg *Config) {
			if err := os.Remove(filepath.Join(cfg.DataDir, "IDENTITY")); err != nil {
				t.Fatal(err)
			}
		}, "no IDENTITY file", ""},
		{"log deleted", func(t *testing.T, cfg *Config) {
			if err := os.RemoveAll(filepath.Join(cfg.DataDir, "wal")); err != nil {
				t.Fatal(err)
			}
		}, "the write-ahead log " + "%DIR%/wal is missing", ""},
		{"log emptied", func(t *testing.T, cfg *Config) {
			// A segment cut to nothing reads as one whose header a crash
			// tore: the WAL writes it again (a header, no record), and
			// then the node refuses, since VOTE says it voted.
			if err := os.Truncate(filepath.Join(cfg.DataDir, "wal", "0000000000000001.wal"), 0); err != nil {
				t.Fatal(err)
			}
		}, "the write-ahead log is empty, but VOTE says the node voted", "/wal/0000000000000001.wal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "node")
			cfg := newDirNode(t, dir)
			tt.change(t, &cfg)
			before := listTree(t, dir, tt.repaired)
			err := restartOn(t, cfg)
			if tt.text == "" {
				if err != nil {
					t.Fatalf("restart: %v", err)
				}
				return
			}
			want := strings.ReplaceAll(tt.text, "%DIR%", dir)
			if !errors.Is(err, ErrDataDir) || !strings.Contains(err.Error(), want) ||
				!strings.Contains(err.Error(), "coord cluster remove") {
				t.Fatalf("restart: %v\nwant ErrDataDir saying %q and how to recover", err, want)
			}
			if after := listTree(t, dir, tt.repaired); strings.Join(after, "\n") != strings.Join(before, "\n") {
				t.Fatalf("the refused start changed the directory:\nbefore %q\nafter  %q", before, after)
			}
		})
	}
}

// listTree lists the files under dir with their sizes, but for except
// (a path under dir, "" for none), which is listed by name alone.
func listTree(t *testing.T, dir, except string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if except != "" && strings.TrimPrefix(path, dir) == except {
			out = append(out, except)
			return nil
		}
		out = append(out, strings.TrimPrefix(path, dir)+" "+info.Mode().String()+" "+time.Duration(info.Size()).String())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
