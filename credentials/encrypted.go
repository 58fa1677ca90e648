package credentials

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"

	"golang.org/x/sys/unix"
)

// encryptedKeys are the ids of the keys systemd encrypts a credential with (systemd-creds
// encrypt: the host's, a TPM's, both, scoped to a user, or the null key), the first 16 bytes of
// every encrypted credential (systemd's src/shared/creds-util.h, CRED_KEY_IS_VALID).
var encryptedKeys = func() [][]byte {
	var ids [][]byte
	for _, s := range []string{
		"5a1c6a86df9d4096b1d5a65e0862f19a", // by the host's key
		"55b9ed1d38594d43a8319d2ebb332ac6", // by the host's key, scoped to a user
		"0c7cc07b117645919c4b0bea08bc20fe", // by a TPM2
		"faf7eb9341e3412ca1a436f95a29362f", // by a TPM2, with a public key
		"93a894094874449090caf2fc93cab553", // by the host's key and a TPM2
		"ef4ac13679a9480ea7db68897f9f165d", // by the host's key and a TPM2, scoped
		"af4950a849134eb1a73846304ff30c05", // by the host's key and a TPM2, with a public key
		"adbc4ca3efb64201ba881b6f2e4095ea", // the same, scoped
		"058469daf6f54324800549da0f8ea2fb", // by the null key (no TPM2: integrity only)
	} {
		id, err := hex.DecodeString(s)
		if err != nil || len(id) != 16 {
			panic("credentials: bad key id " + s)
		}
		ids = append(ids, id)
	}
	return ids
}()

// Encrypted reports whether b is a credential encrypted by systemd (systemd-creds encrypt, in
// Base64 as it writes one, or binary): only the system manager decrypts it, for a unit's
// LoadCredentialEncrypted=; holdfast never decrypts a job's. A plain secret that happened to start so
// would be 16 bytes of one of systemd's key ids.
func Encrypted(b []byte) bool {
	raw := b
	if decoded, err := base64.StdEncoding.DecodeString(string(bytes.Join(bytes.Fields(b), nil))); err == nil {
		raw = decoded
	}
	if len(raw) < 16 {
		return false
	}
	for _, id := range encryptedKeys {
		if bytes.Equal(raw[:16], id) {
			return true
		}
	}
	return false
}

// EncryptedFile reports whether the file at path (its last component not followed, read at
// most MaxSource bytes) is a credential systemd encrypted; a file it cannot read is not.
func EncryptedFile(path string) bool {
	b, err := ReadBounded(path, true, MaxSource, func(string, *unix.Stat_t) error { return nil })
	return err == nil && Encrypted(b)
}
