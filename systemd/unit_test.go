package systemd

import (
	"reflect"
	"testing"
)

// Credentials systemd encrypted are named by LoadCredentialEncrypted=, the others by
// LoadCredential=, each property only when it names one.
func TestCredentialProperties(t *testing.T) {
	type cred = struct{ Name, Path string }
	for _, tc := range []struct {
		creds            []Credential
		plain, encrypted []cred
	}{
		{nil, nil, nil},
		{[]Credential{{Name: "p", Path: "/s/p"}}, []cred{{"p", "/s/p"}}, nil},
		{[]Credential{{Name: "p", Path: "/s/p", Encrypted: true}, {Name: "e", Path: "/s/e"}}, []cred{{"e", "/s/e"}}, []cred{{"p", "/s/p"}}},
	} {
		props, err := Spec{Name: "u", ExecStart: []string{"/bin/true"}, LoadCredentials: tc.creds}.properties()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][]cred{}
		for _, p := range props {
			if p.Name == "LoadCredential" || p.Name == "LoadCredentialEncrypted" {
				got[p.Name] = p.Value.Value().([]cred)
			}
		}
		if !reflect.DeepEqual(got["LoadCredential"], tc.plain) || !reflect.DeepEqual(got["LoadCredentialEncrypted"], tc.encrypted) {
			t.Errorf("%+v: LoadCredential %v, LoadCredentialEncrypted %v", tc.creds, got["LoadCredential"], got["LoadCredentialEncrypted"])
		}
	}
}
