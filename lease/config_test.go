package lease_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"coord/lease"
)

func TestConfigValidate(t *testing.T) {
	valid := lease.DefaultConfig()
	valid.Name, valid.Holder = "leader", "alice"
	if err := valid.Validate(); err != nil {
		t.Fatalf("DefaultConfig with a name and holder: %v", err)
	}
	tests := []struct {
		change func(*lease.Config)
		want   []string
	}{
		{func(c *lease.Config) { c.Name = "" }, []string{"Name is empty"}},
		{func(c *lease.Config) { c.Holder = "" }, []string{"Holder is empty"}},
		{func(c *lease.Config) { c.TTL = c.RenewDeadline }, []string{"TTL 6s is not greater than RenewDeadline 6s"}},
		{func(c *lease.Config) { c.RenewInterval = c.RenewDeadline }, []string{"RenewDeadline 6s is not greater than RenewInterval 6s"}},
		{func(c *lease.Config) { c.RenewInterval = 0 }, []string{"RenewInterval 0s is not positive"}},
		{func(c *lease.Config) { c.RetryPeriod = -time.Second }, []string{"RetryPeriod -1s is not positive"}},
		{func(c *lease.Config) { c.TTL, c.Name = time.Second, "" }, []string{"Name is empty", "TTL 1s is not greater than RenewDeadline 6s"}},
	}
	for _, tt := range tests {
		c := valid
		tt.change(&c)
		err := c.Validate()
		if !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalid", c, err)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Validate error %q does not say %q", err, w)
			}
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("Validate error %q is not one line", err)
		}
	}
}

func TestScaledConfig(t *testing.T) {
	c := lease.ScaledConfig(9 * time.Second)
	d := lease.DefaultConfig()
	if c.TTL != d.TTL || c.RenewDeadline != d.RenewDeadline || c.RenewInterval != d.RenewInterval || c.RetryPeriod != d.RetryPeriod {
		t.Errorf("ScaledConfig(9s) = %+v, want DefaultConfig %+v", c, d)
	}
	for _, ttl := range []time.Duration{time.Millisecond, 90 * time.Millisecond, time.Second, time.Hour} {
		c := lease.ScaledConfig(ttl)
		c.Name, c.Holder = "n", "h"
		if err := c.Validate(); err != nil {
			t.Errorf("ScaledConfig(%v) does not validate: %v", ttl, err)
		}
	}
}
