package sim

import (
	"reflect"
	"testing"
)

// Every field of Stats is in a total: summed, or for MaxQueuedToNode the
// larger. A field Add left out (or one it cannot add) fails here.
func TestStatsAddCoversEveryField(t *testing.T) {
	var a, b Stats
	av, bv := reflect.ValueOf(&a).Elem(), reflect.ValueOf(&b).Elem()
	for i := range av.NumField() {
		av.Field(i).SetInt(int64(i + 1))
		bv.Field(i).SetInt(int64(100 * (i + 1)))
	}
	a.Add(b)
	for i := range av.NumField() {
		name := av.Type().Field(i).Name
		want := int64(101 * (i + 1))
		if name == "MaxQueuedToNode" {
			want = int64(100 * (i + 1))
		}
		if got := av.Field(i).Int(); got != want {
			t.Errorf("%s = %d after Add, want %d", name, got, want)
		}
	}
}
