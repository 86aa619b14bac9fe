package main

import (
	"fmt"
	"os"
	"strings"

	"coord/internal/pki"
	"coord/lease/raftlease"
	"coord/server/localcluster"

	"github.com/spf13/cobra"
)

// accessFlags say how to reach a cluster: its endpoints, TLS files and
// token, each falling back on the variable `coord cluster env` exports
// when its flag is not given.
type accessFlags struct {
	dir       string
	endpoints string
	cacert    string
	cert      string
	key       string
	tokenFile string
}

func (f *accessFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	addDirFlag(cmd, &f.dir)
	fl.StringVar(&f.endpoints, "endpoints", "", "the nodes' API addresses, HOST:PORT or https://HOST:PORT, comma-separated (default: $COORD_ENDPOINTS, else the cluster in --dir)")
	fl.StringVar(&f.cacert, "cacert", "", "CA bundle to verify the nodes' certificates with (default: $COORD_CACERT)")
	fl.StringVar(&f.cert, "cert", "", "client certificate, for a cluster that requires one (default: $COORD_CERT)")
	fl.StringVar(&f.key, "key", "", "the client certificate's key (default: $COORD_KEY)")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding the token (default: $COORD_TOKEN, which holds the token itself)")
}

// resolve returns the endpoints and access the flags, the environment or
// the cluster in --dir describe, in that order: --dir is used when it is
// given, or when neither --endpoints nor COORD_ENDPOINTS is.
func (f accessFlags) resolve(cmd *cobra.Command, getenv func(string) string) ([]string, localcluster.Access, error) {
	endpoints := f.endpoints
	if endpoints == "" && !cmd.Flags().Changed("dir") {
		endpoints = getenv(raftlease.EnvEndpoints)
	}
	if endpoints == "" {
		info, err := localcluster.Load(f.dir)
		if err != nil {
			return nil, localcluster.Access{}, err
		}
		acc, err := info.Security.Load()
		if err != nil {
			return nil, localcluster.Access{}, err
		}
		var eps []string
		for _, n := range info.Nodes {
			eps = append(eps, n.HTTP)
		}
		return eps, acc, nil
	}
	eps := strings.Split(endpoints, ",")
	or := func(flag, env string) string {
		if flag != "" {
			return flag
		}
		return getenv(env)
	}
	caFile, certFile, keyFile := or(f.cacert, raftlease.EnvCACert), or(f.cert, raftlease.EnvCert), or(f.key, raftlease.EnvKey)
	var acc localcluster.Access
	if caFile != "" || certFile != "" || strings.Contains(endpoints, "https://") {
		conf, err := pki.LoadClientConfig(caFile, certFile, keyFile)
		if err != nil {
			return nil, acc, err
		}
		acc.TLS = conf
	}
	token := getenv(raftlease.EnvToken)
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return nil, acc, fmt.Errorf("--token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	return eps, localcluster.NewAccess(acc.TLS, token), nil
}
