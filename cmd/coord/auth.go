package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"coord/api"
	"coord/client"

	"github.com/spf13/cobra"
)

// newAuthCmd manages a secure cluster's tokens.
func newAuthCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "auth",
		Short: "Manage a secure cluster's API tokens",
		Long: `Manage the bearer tokens a secure cluster checks on every request. A token
has a role: read (GET and watches), write (also puts, deletes and leases)
or admin (also membership and tokens), and may be limited to keys and
lease names that start with a prefix. The cluster keeps only each token's
SHA-256 hash; the token is shown once, when it is made.

These commands need an admin token: --token-file, or $COORD_TOKEN as
coord cluster env sets it (see docs/security.md).`,
		Example: `  eval "$(coord cluster env --dir /tmp/c)"
  coord auth token create --role read --prefix app/`,
		Args: usageArgs(cobra.NoArgs),
	}
	token := &cobra.Command{
		Use:   "token",
		Short: "Create, list and revoke tokens",
		Example: `  coord auth token create --role write --prefix billing/ --name billing
  coord auth token list --json
  coord auth token revoke 17`,
		Args: usageArgs(cobra.NoArgs),
	}
	token.AddCommand(newTokenCreateCmd(), newTokenListCmd(), newTokenRevokeCmd())
	cmd.AddCommand(token)
	return cmd
}

// adminClient is a client of the cluster the access flags name.
func adminClient(cmd *cobra.Command, access accessFlags) (*client.Client, error) {
	eps, acc, err := access.resolve(cmd, os.Getenv)
	if err != nil {
		return nil, err
	}
	if acc.TLS == nil {
		fmt.Fprintln(cmd.ErrOrStderr(), "coord: warning: talking to the cluster without TLS")
	}
	cfg := acc.ClientConfig(eps...)
	cfg.WarmInterval = 0 // one request and the process ends: no connections to the other nodes in advance
	return client.New(cfg)
}

func newTokenCreateCmd() *cobra.Command {
	var (
		access                     accessFlags
		role, prefix, keyP, leaseP string
		name                       string
		jsonOut                    bool
	)
	cmd := &cobra.Command{
		Use:   "create --role read|write|admin [--prefix P | --key-prefix P --lease-prefix P] [--name N]",
		Short: "Make a token and print it (the only time it is shown)",
		Long: `Make a token and print it on stdout, alone on its line, so that
'TOKEN=$(coord auth token create --role read)' keeps it; its id and what
it may do go to stderr. --prefix limits both keys and lease names;
--key-prefix and --lease-prefix limit each. An admin token has no prefix.`,
		Example: `  coord auth token create --role write --prefix billing/ --name billing
  TOKEN=$(coord auth token create --role read --prefix app/)`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := api.ParseTokenRole(role)
			if err != nil {
				return &usageError{err: fmt.Errorf("--role: %w", err)}
			}
			if prefix != "" && (keyP != "" || leaseP != "") {
				return usagef("--prefix sets both prefixes: give it, or --key-prefix and --lease-prefix")
			}
			if prefix != "" {
				keyP, leaseP = prefix, prefix
			}
			cl, err := adminClient(cmd, access)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			t, err := cl.CreateToken(ctx, client.TokenSpec{Role: r, KeyPrefix: keyP, LeasePrefix: leaseP, Name: name})
			if err != nil {
				return err
			}
			if jsonOut {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(t)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "token %d: role %s, keys %q, leases %q, name %q\n", t.ID, t.Role, t.KeyPrefix, t.LeasePrefix, t.Name)
			fmt.Fprintln(cmd.OutOrStdout(), t.Secret)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&role, "role", "", "read, write or admin (required)")
	fl.StringVar(&prefix, "prefix", "", "limit the token to keys and lease names starting with this")
	fl.StringVar(&keyP, "key-prefix", "", "limit the token to keys starting with this")
	fl.StringVar(&leaseP, "lease-prefix", "", "limit the token to lease names starting with this")
	fl.StringVar(&name, "name", "", "a label for people")
	addJSONFlag(cmd, &jsonOut, "print one JSON object: the token and its description")
	access.register(cmd)
	return cmd
}

func newTokenListCmd() *cobra.Command {
	var (
		access  accessFlags
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the tokens: ids, roles, prefixes and names (never the tokens)",
		Long: `List the cluster's tokens: id, role, prefixes and name; the cluster never
had the tokens themselves to show. With --json, one JSON object:
{"tokens": [{"id", "role", "key_prefix", "lease_prefix", "name"}]}.`,
		Example: `  coord auth token list
  coord auth token list --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := adminClient(cmd, access)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			toks, err := cl.Tokens(ctx)
			if err != nil {
				return err
			}
			if jsonOut {
				if toks == nil {
					toks = []api.Token{}
				}
				return writeJSON(cmd.OutOrStdout(), map[string]any{"tokens": toks})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tROLE\tKEY PREFIX\tLEASE PREFIX\tNAME")
			for _, t := range toks {
				fmt.Fprintf(tw, "%d\t%s\t%q\t%q\t%s\n", t.ID, t.Role, t.KeyPrefix, t.LeasePrefix, t.Name)
			}
			return tw.Flush()
		},
	}
	access.register(cmd)
	addJSONFlag(cmd, &jsonOut, "print one JSON object listing the tokens")
	return cmd
}

func newTokenRevokeCmd() *cobra.Command {
	var (
		access  accessFlags
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "revoke ID [--json]",
		Short: "Revoke a token: every node refuses it once it has applied the revocation",
		Long: `Revoke the token with this id ('coord auth token list' shows them). With
--json, one JSON object: {"revoked": ID, "revision": N}.`,
		Example: `  coord auth token revoke 17`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil || id == 0 {
				return usagef("token id %q: want a positive integer (coord auth token list shows them)", args[0])
			}
			cl, err := adminClient(cmd, access)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			rev, err := cl.RevokeToken(ctx, id)
			if err != nil {
				return err
			}
			if jsonOut {
				return writeJSON(cmd.OutOrStdout(), map[string]uint64{"revoked": id, "revision": rev})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked token %d at revision %d\n", id, rev)
			return nil
		},
	}
	access.register(cmd)
	addJSONFlag(cmd, &jsonOut, "print one JSON object naming the token and the revision")
	return cmd
}
