package rafttest

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	"coord/raft"
)

// configCommand runs "config KEY=VALUE...": the settings of nodes started
// later. Every key must be known and every value parse, so that a
// transcript cannot silently run with a setting it did not ask for.
func configCommand(sc *script, args []string) error {
	next := maps.Clone(sc.overrides)
	for _, kv := range args[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("%w: %q is not KEY=VALUE", errUsage, kv)
		}
		next[k] = v
	}
	cfg := DefaultConfig(1)
	if err := applyOverrides(&cfg, next); err != nil {
		return err
	}
	maps.Copy(sc.overrides, next)
	return nil
}

// applyOverrides sets the configuration fields that overrides name.
func applyOverrides(cfg *raft.Config, overrides map[string]string) error {
	for k, v := range overrides {
		var err error
		switch k {
		case "election":
			cfg.ElectionTicks, err = strconv.Atoi(v)
		case "heartbeat":
			cfg.HeartbeatTicks, err = strconv.Atoi(v)
		case "prevote":
			cfg.PreVote, err = strconv.ParseBool(v)
		case "checkquorum":
			cfg.CheckQuorum, err = strconv.ParseBool(v)
		case "inflight":
			cfg.MaxInflightMsgs, err = strconv.Atoi(v)
		case "appendbytes":
			cfg.MaxAppendBytes, err = strconv.ParseUint(v, 10, 64)
		default:
			return fmt.Errorf("%w: unknown config key %q", errUsage, k)
		}
		if err != nil {
			return fmt.Errorf("%w: config %s=%s: %v", errUsage, k, v, err)
		}
	}
	return nil
}
