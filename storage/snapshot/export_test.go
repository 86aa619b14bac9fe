package snapshot

// MaxMetadataBytes is the longest metadata a reader accepts, for the
// tests of the writer's limit.
const MaxMetadataBytes = maxMetadataBytes
