package leasetest

import "coord/lease/fence"

// FencedResource is the fenced resource the exclusivity checker writes to;
// it lives in package fence so that non-test code (the lab) can use it
// without linking package testing.
type FencedResource = fence.Resource
