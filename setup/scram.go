package setup

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
)

// ScramIterations is the iteration count of the verifiers ScramVerifier makes: PostgreSQL's own
// default (scram_iterations).
const ScramIterations = 4096

const scramSaltBytes = 16

// ScramVerifier computes, here, the SCRAM-SHA-256 verifier PostgreSQL stores for password (RFC
// 5802, RFC 7677), in the server's form
//
//	SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>
//
// with a new random salt. Given as a role's PASSWORD the server stores it as it is, so the
// password itself never reaches the server, its statement log or its statistics. PostgreSQL
// runs the password through SASLprep first, which leaves printable ASCII alone; other passwords
// are refused rather than risk a verifier the server would compute differently.
func ScramVerifier(password string) (string, error) {
	salt := make([]byte, scramSaltBytes)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	return scramVerifier(password, salt, ScramIterations)
}

// scramVerifier is ScramVerifier with the salt and iteration count given.
func scramVerifier(password string, salt []byte, iterations int) (string, error) {
	if password == "" {
		return "", fmt.Errorf("an empty password")
	}
	for i := 0; i < len(password); i++ {
		if c := password[i]; c < 0x21 || c > 0x7e {
			return "", fmt.Errorf("the password holds a character other than printable ASCII")
		}
	}
	// SaltedPassword := Hi(password, salt, i), Hi being PBKDF2 with HMAC-SHA-256.
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return "", err
	}
	clientKey := hmacSHA256(salted, "Client Key")
	storedKey := sha256.Sum256(clientKey)
	serverKey := hmacSHA256(salted, "Server Key")
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", iterations, b64(salt), b64(storedKey[:]), b64(serverKey)), nil
}

func hmacSHA256(key []byte, msg string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}
