package server

import (
	"errors"
	"strings"
	"testing"

	"coord/api"
)

// TestRequestBodiesAreOneJSONObjectOfKnownFields: every JSON body the API
// takes (leases, tokens, members, batches) refuses unknown fields,
// anything after its object, and text JSON would not carry as it is
// (checkJSONText, before any decoding) with ErrInvalid; a well-formed body
// with trailing white space is taken.
func TestRequestBodiesAreOneJSONObjectOfKnownFields(t *testing.T) {
	decoders := map[string]func(body string) error{
		"lease": func(body string) error { _, err := leaseRequest(&request{body: []byte(body)}); return err },
		"token": func(body string) error { _, _, err := tokenRequest([]byte(body)); return err },
		"member": func(body string) error {
			var mr api.MemberRequest
			return decodeStrict([]byte(body), "member request body", &mr)
		},
		"batch": func(body string) error { _, err := parseBatch([]byte(body)); return err },
	}
	good := map[string]string{
		"lease":  `{"holder":"a","ttl_ms":1000}`,
		"token":  `{"role":"read"}`,
		"member": `{"id":4,"peer":"127.0.0.1:1"}`,
		"batch":  `{"ops":[]}`,
	}
	for name, decode := range decoders {
		body := good[name]
		if err := decode(body + " \n"); err != nil {
			t.Errorf("%s: %q: %v", name, body, err)
		}
		for _, bad := range []struct{ what, body, want string }{
			{"data after the object", body + `{}`, "data after the JSON object"},
			{"a stray brace", body + `}`, "data after the JSON object"},
			{"an unknown field", `{"nope":1,` + body[1:], "unknown field"},
			{"a byte that is not UTF-8", body[:len(body)-1] + ` ` + "\xff" + `}`, "not valid UTF-8"},
			{"a lone surrogate", `{"nope":"\ud800",` + body[1:], "lone UTF-16 surrogate"},
		} {
			err := decode(bad.body)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), bad.want) {
				t.Errorf("%s with %s (%q): %v, want ErrInvalid saying %q", name, bad.what, bad.body, err, bad.want)
			}
		}
	}
}
