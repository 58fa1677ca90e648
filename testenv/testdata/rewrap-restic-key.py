#!/usr/bin/env python3
# Made testdata/restic-repo, which testenv.ResticRepo lays out: `restic init` (restic 0.14) with
# the tests' password (testenv.ResticPassword), then this script over the repository, which
# wraps the same master key in a key file whose scrypt parameters are cheap (N=128, r=1, p=1, as
# restic's own tests use), so that each restic command in a test spends milliseconds, not a fifth
# of a second, deriving the key:
#   python3 rewrap-restic-key.py REPO PASSWORD-FILE 128 1 1
# Needs the cryptography package (AES, Poly1305).
import json, base64, hashlib, os, sys, glob
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.poly1305 import Poly1305

def derive(pw, salt, N, r, p):
    return hashlib.scrypt(pw, salt=salt, n=N, r=r, p=p, dklen=64, maxmem=2**31-1)

def mac(keys, iv, ct):
    k, rr = keys[32:48], keys[48:64]
    enc = Cipher(algorithms.AES(k), modes.ECB()).encryptor()
    s = enc.update(iv) + enc.finalize()
    return Poly1305.generate_tag(rr + s, ct)

def decrypt(keys, data):
    iv, ct, tag = data[:16], data[16:-16], data[-16:]
    assert mac(keys, iv, ct) == tag, "MAC mismatch"
    d = Cipher(algorithms.AES(keys[:32]), modes.CTR(iv)).decryptor()
    return d.update(ct) + d.finalize()

def encrypt(keys, pt):
    iv = os.urandom(16)
    e = Cipher(algorithms.AES(keys[:32]), modes.CTR(iv)).encryptor()
    ct = e.update(pt) + e.finalize()
    return iv + ct + mac(keys, iv, ct)

repo, pwfile, N, r, p = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
pw = open(pwfile, 'rb').read().rstrip(b'\n')
[path] = glob.glob(repo + '/keys/*')
k = json.load(open(path))
master = decrypt(derive(pw, base64.b64decode(k['salt']), k['N'], k['r'], k['p']), base64.b64decode(k['data']))
salt = os.urandom(64)
k.update(N=N, r=r, p=p, salt=base64.b64encode(salt).decode(), data=base64.b64encode(encrypt(derive(pw, salt, N, r, p), master)).decode())
out = json.dumps(k).encode()
os.remove(path)
open(os.path.join(repo, 'keys', hashlib.sha256(out).hexdigest()), 'wb').write(out)
print("ok", N, r, p)
