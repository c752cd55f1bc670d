"""Networks the harness can cut: between any two of the clients (the harness's own process) and
the servers.

``NamespaceNet`` (needs root and ``ip netns``): every server in a network namespace of its own,
a veth pair from the root namespace (where the clients run) to each, and one between every two
servers; a partition is an nftables table in the namespaces concerned that drops the packets
between two addresses, both ways. Dropped, not refused: TCP connections hang as they do when a
switch dies, and the first side to notice is whoever times out.

``ProxyNet`` (anywhere): the servers on loopback, every path (client to server, server to
server) through a TCP relay in the harness; a partition stops the relay forwarding in both
directions while keeping the connections open, the same hang.

Both give a node the address to listen on, the address the clients use and the address a peer
uses; ``cut(a, b)`` and ``heal()`` take node names or ``CLIENT``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
from collections.abc import Sequence

__all__ = ["CLIENT", "NamespaceNet", "ProxyNet", "make_net"]

CLIENT = "client"


def _run(*cmd: str) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise OSError(f"{' '.join(cmd)}: {r.stderr.strip() or r.returncode}")


class NamespaceNet:
    """Network namespaces and veth pairs for ``names`` (torn down by ``close``)."""

    kind = "netns"

    def __init__(self, names: Sequence[str]) -> None:
        tag = os.getpid() % 10000
        self.names = list(names)
        self.ns = {n: f"stc{tag}{n}" for n in names}
        base = 10 + (os.getpid() % 40) * 6  # two harnesses at once rarely share subnets
        self._links: dict[frozenset[str], tuple[str, str]] = {}  # pair -> (ip of a, ip of b), sorted
        self._ips: dict[tuple[str, str], str] = {}  # (node, peer) -> node's ip on that link
        self._made_ns: list[str] = []
        self._made_links: list[str] = []
        self._cuts: list[tuple[str, str]] = []
        try:
            for n in names:
                _run("ip", "netns", "add", self.ns[n])
                self._made_ns.append(self.ns[n])
                _run("ip", "-n", self.ns[n], "link", "set", "lo", "up")
            peers = [CLIENT, *names]
            k = 0
            for i, a in enumerate(peers):
                for b in peers[i + 1:]:
                    self._link(a, b, f"10.231.{base + k}")
                    k += 1
            for n in names:
                self._nft(n, "add table inet campaign")
                self._nft(n, "add chain inet campaign in { type filter hook input priority 0; }")
                self._nft(n, "add chain inet campaign out { type filter hook output priority 0; }")
        except BaseException:
            self.close()
            raise

    def _link(self, a: str, b: str, subnet: str) -> None:
        ia, ib = f"stc{os.getpid() % 10000}{a[:1]}{b[:1]}a", f"stc{os.getpid() % 10000}{a[:1]}{b[:1]}b"
        _run("ip", "link", "add", ia, "type", "veth", "peer", "name", ib)
        self._made_links.append(ia)
        for iface, node, host in ((ia, a, 1), (ib, b, 2)):
            ip = f"{subnet}.{host}"
            if node == CLIENT:
                _run("ip", "addr", "add", f"{ip}/30", "dev", iface)
                _run("ip", "link", "set", iface, "up")
            else:
                _run("ip", "link", "set", iface, "netns", self.ns[node])
                _run("ip", "-n", self.ns[node], "addr", "add", f"{ip}/30", "dev", iface)
                _run("ip", "-n", self.ns[node], "link", "set", iface, "up")
            self._ips[(node, b if node == a else a)] = ip

    def _nft(self, node: str, rule: str) -> None:
        _run("ip", "netns", "exec", self.ns[node], "nft", rule)

    def netns(self, node: str) -> str | None:
        return self.ns[node]

    def listen_on(self, node: str) -> str:
        return "0.0.0.0"

    def client_address(self, node: str, port: int) -> str:
        return f"{self._ips[(node, CLIENT)]}:{port}"

    def peer_address(self, node: str, port: int, seen_by: str) -> str:
        return f"{self._ips[(node, seen_by)]}:{port}"

    def _drops(self, me: str, cuts: Sequence[tuple[str, str]]) -> list[str]:
        """The rules in ``me``'s namespace that make ``cuts``."""
        out = []
        for a, b in cuts:
            for mine, other in ((a, b), (b, a)):
                if mine == me:
                    ip = self._ips[(other, me)]
                    out += [f"add rule inet campaign in ip saddr {ip} drop",
                            f"add rule inet campaign out ip daddr {ip} drop"]
        return out

    def cut(self, a: str, b: str) -> None:
        self._cuts.append((a, b))
        for me in (a, b):
            if me != CLIENT:
                for rule in self._drops(me, [(a, b)]):
                    self._nft(me, rule)

    def heal_between(self, a: str, b: str) -> None:
        """Heal the cut between ``a`` and ``b`` alone; every other cut stays, without a gap
        (each namespace's rules are replaced in one nftables transaction)."""
        self._cuts = [c for c in self._cuts if set(c) != {a, b}]
        for n in self.names:
            script = ["flush chain inet campaign in", "flush chain inet campaign out", *self._drops(n, self._cuts)]
            _run("ip", "netns", "exec", self.ns[n], "nft", "; ".join(script))

    def exec_in(self, node: str, *cmd: str) -> str:
        """Run ``cmd`` in ``node``'s namespace (what that node sees of the network); its output."""
        r = subprocess.run(["ip", "netns", "exec", self.ns[node], *cmd], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise OSError(f"{' '.join(cmd)} in {node}: {r.stderr.strip()[-2000:] or r.returncode}")
        return r.stdout

    def heal(self) -> None:
        self._cuts = []
        for n in self.names:
            self._nft(n, "flush chain inet campaign in")
            self._nft(n, "flush chain inet campaign out")

    def close(self) -> None:
        for link in self._made_links:
            with contextlib.suppress(OSError):
                _run("ip", "link", "del", link)
        for ns in self._made_ns:
            with contextlib.suppress(OSError):
                _run("ip", "netns", "del", ns)
        self._made_links, self._made_ns = [], []


class _Relay:
    """A TCP relay on loopback to ``target`` (host, port); ``blocked`` stops it forwarding."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.blocked = threading.Event()
        self._unblocked = threading.Condition()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self._listener.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(self.target, timeout=5)
            except OSError:
                down.close()
                continue
            up.settimeout(None)
            self._socks += [down, up]
            for src, dst in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(1 << 16):
                with self._unblocked:
                    self._unblocked.wait_for(lambda: not self.blocked.is_set())
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def set_blocked(self, blocked: bool) -> None:
        with self._unblocked:
            if blocked:
                self.blocked.set()
            else:
                self.blocked.clear()
            self._unblocked.notify_all()

    def close(self) -> None:
        self.set_blocked(False)
        self._listener.close()
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.close()


class ProxyNet:
    """The servers on loopback; each path through a ``_Relay`` made on first use."""

    kind = "proxy"

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self._relays: dict[tuple[str, str], _Relay] = {}  # (node, seen_by) -> relay

    def netns(self, node: str) -> str | None:
        return None

    def listen_on(self, node: str) -> str:
        return "127.0.0.1"

    def _relay(self, node: str, port: int, seen_by: str) -> _Relay:
        r = self._relays.get((node, seen_by))
        if r is None or r.target[1] != port:
            r = self._relays[(node, seen_by)] = _Relay(("127.0.0.1", port))
        return r

    def client_address(self, node: str, port: int) -> str:
        return f"127.0.0.1:{self._relay(node, port, CLIENT).port}"

    def peer_address(self, node: str, port: int, seen_by: str) -> str:
        return f"127.0.0.1:{self._relay(node, port, seen_by).port}"

    def cut(self, a: str, b: str) -> None:
        for (node, seen_by), r in self._relays.items():
            if {node, seen_by} == {a, b}:
                r.set_blocked(True)

    def heal(self) -> None:
        for r in self._relays.values():
            r.set_blocked(False)

    def close(self) -> None:
        for r in self._relays.values():
            r.close()
        self._relays.clear()


def make_net(names: Sequence[str], want: str = "netns") -> tuple[NamespaceNet | ProxyNet, str]:
    """The network asked for (``netns`` or ``proxy``), or the proxy with the reason the
    namespaces could not be made."""
    if want == "netns":
        if os.geteuid() != 0:
            return ProxyNet(names), "network namespaces need root"
        try:
            return NamespaceNet(names), ""
        except OSError as e:
            return ProxyNet(names), f"cannot make network namespaces here: {e}"
    return ProxyNet(names), "proxy asked for"
