package rafttest

// campaignCommand runs "campaign ID": the node starts an election now.
func campaignCommand(sc *script, args []string) error {
	nd, err := sc.node(args)
	if err != nil {
		return err
	}
	nd.Core.Campaign()
	return nd.Handler.Handle()
}
