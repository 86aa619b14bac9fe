package raft

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

func validConfig() Config {
	cfg := DefaultConfig()
	cfg.ID = 1
	cfg.Storage = NewMemoryStorage()
	cfg.Rand = rand.New(rand.NewPCG(1, 2))
	return cfg
}

func TestConfigValidateNamesTheField(t *testing.T) {
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	tests := []struct {
		field  string
		mutate func(*Config)
	}{
		{"ID", func(c *Config) { c.ID = 0 }},
		{"Storage", func(c *Config) { c.Storage = nil }},
		{"Rand", func(c *Config) { c.Rand = nil }},
		{"HeartbeatTicks", func(c *Config) { c.HeartbeatTicks = 0 }},
		{"ElectionTicks", func(c *Config) { c.ElectionTicks = c.HeartbeatTicks }},
		{"MaxAppendBytes", func(c *Config) { c.MaxAppendBytes = 0 }},
		{"MaxInflightMsgs", func(c *Config) { c.MaxInflightMsgs = 0 }},
		{"MaxInflightBytes", func(c *Config) { c.MaxInflightBytes = c.MaxAppendBytes - 1 }},
		{"Peers", func(c *Config) { c.Peers = []uint64{1, 0} }},
	}
	for _, tt := range tests {
		cfg := validConfig()
		tt.mutate(&cfg)
		err := cfg.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidConfig naming the field", tt.field, err)
		}
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: New() = %v, want ErrInvalidConfig", tt.field, err)
		}
	}
}

func TestNewRejectsAppliedBeyondCommit(t *testing.T) {
	cfg := validConfig()
	cfg.Applied = 5
	if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("New with Applied past commit = %v, want ErrInvalidConfig", err)
	}
}
