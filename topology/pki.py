"""Certificates for OpenFlow over TLS, made with the system's ``openssl`` (issue 40).

Freeway's convention (``ryu_apps/control/channels.py``): a switch's certificate names every datapath id it
may claim, as ``dpid:`` and 16 hex digits, in a subjectAltName ``URI:urn:freeway:dpid:XXXXXXXXXXXXXXXX``
(or its common name). ``ovs-pki`` names a certificate by switch name and a UUID; a certificate made by
``ovs-pki`` is therefore refused under ``switch_identity`` (the default) until it is re-issued with such
a name (docs/security.md shows both ways).

``Pki.create(dir)`` makes a CA; ``issue`` a certificate signed by it: a switch's (naming its datapath ids),
the controller's (a server name), or a client's. Keys are P-256 EC, certificates valid ``days`` (365).
Every file lands in the directory given, keys readable by their owner only. Nothing here talks to a
switch or the controller.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path


class PkiError(RuntimeError):
    pass


def dpid_uri(dpid: int) -> str:
    return f"URI:urn:freeway:dpid:{dpid:016x}"


def _openssl(*args: str, cwd: Path) -> str:
    if shutil.which("openssl") is None:
        raise PkiError("openssl is not installed (apt-get install openssl)")
    # every file openssl writes is its owner's only from the start (a key written under the umask and
    # chmod-ed after could be read in between: issue 60 item 6)
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, preexec_fn=lambda: os.umask(0o077))
    if r.returncode != 0:
        raise PkiError(f"openssl {args[0]} failed: {(r.stderr or r.stdout).strip()[:400]}")
    return r.stdout


@dataclass(frozen=True)
class Issued:
    key: Path
    cert: Path


@dataclass(frozen=True)
class Pki:
    """A CA in ``dir`` (``<name>-ca.key``, ``<name>-ca.pem``)."""

    dir: Path
    name: str = "freeway"

    @property
    def ca(self) -> Path:
        return self.dir / f"{self.name}-ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.dir / f"{self.name}-ca.key"

    @classmethod
    def create(cls, dir: str | Path, name: str = "freeway", days: int = 3650) -> Pki:
        """A new CA (kept if ``dir`` already holds one of that name)."""
        pki = cls(Path(dir), name)
        pki.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(pki.dir, 0o700)  # the CA's key is in it: nobody else lists or reads the directory
        if pki.ca.exists() and pki.ca_key.exists():
            return pki
        _key(pki.ca_key)
        _openssl("req", "-x509", "-new", "-key", str(pki.ca_key), "-out", str(pki.ca), "-days", str(days),
                 "-subj", f"/O=Freeway/CN={name} CA", "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=pki.dir)
        return pki

    def issue(self, name: str, dpids: tuple[int, ...] | list[int] = (), hosts: tuple[str, ...] = (),
              days: int = 365, common_name: bool = True) -> Issued:
        """``<name>.key`` and ``<name>.pem`` signed by this CA: its subjectAltNames name each datapath id
        in ``dpids`` (a switch) and each DNS name or IP address in ``hosts`` (a server). ``common_name``
        False: a subject without a CN (etcd 3.4 refuses a gateway request whose client certificate has a CN
        once its user authentication is on)."""
        if not self.ca.exists():
            raise PkiError(f"no CA in {self.dir} (Pki.create first)")
        key, csr, cert = self.dir / f"{name}.key", self.dir / f"{name}.csr", self.dir / f"{name}.pem"
        _key(key)
        sans = [dpid_uri(d) for d in dpids]
        for h in hosts:
            sans.append(f"IP:{h}" if h.replace(".", "").isdigit() or ":" in h else f"DNS:{h}")
        ext = self.dir / f"{name}.ext"
        lines = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment",
                 # a switch's key may only be a client: it can never pose as the controller to another switch
                 "extendedKeyUsage=" + ("clientAuth" if dpids and not hosts else "serverAuth,clientAuth")]
        if sans:
            lines.append("subjectAltName=" + ",".join(sans))
        ext.write_text("\n".join(lines) + "\n")
        cn = f"dpid:{dpids[0]:016x}" if len(dpids) == 1 else name
        subj = f"/O=Freeway/CN={cn}" if common_name else f"/O=Freeway/OU={name}"
        _openssl("req", "-new", "-key", str(key), "-out", str(csr), "-subj", subj, cwd=self.dir)
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey", str(self.ca_key),
                 "-CAcreateserial", "-out", str(cert), "-days", str(days), "-extfile", str(ext), cwd=self.dir)
        csr.unlink(missing_ok=True)
        ext.unlink(missing_ok=True)
        return Issued(key, cert)


    @property
    def crl(self) -> Path:
        return self.dir / f"{self.name}-crl.pem"

    def revoke(self, name: str, days: int = 30) -> Path:
        """Revoke ``<name>.pem`` (a switch's, say): it joins the CA's revocation list, written again as
        ``<name>-crl.pem`` (valid ``days``: write it again before then, ``revoke`` with no new name does).
        The controller given that list (``ca_crl``) refuses the certificate at the TLS handshake, without a
        new CA for everyone else."""
        cert = self.dir / f"{name}.pem"
        if not cert.exists():
            raise PkiError(f"no certificate {cert} to revoke")
        index, cnf = self._ca_db()
        serial = _openssl("x509", "-in", str(cert), "-noout", "-serial", cwd=self.dir).strip().split("=", 1)[1]
        held = index.read_text()
        if f"\t{serial}\t" not in held:
            end = _openssl("x509", "-in", str(cert), "-noout", "-enddate", cwd=self.dir).strip().split("=", 1)[1]
            subject = _openssl("x509", "-in", str(cert), "-noout", "-subject", "-nameopt", "compat",
                               cwd=self.dir).strip().split("=", 1)[1].strip()
            from datetime import datetime

            expiry = datetime.strptime(end, "%b %d %H:%M:%S %Y %Z").strftime("%y%m%d%H%M%SZ")
            now = datetime.now(UTC).strftime("%y%m%d%H%M%SZ")
            index.write_text(held + f"R\t{expiry}\t{now}\t{serial}\tunknown\t{subject}\n")
        return self.write_crl(days)

    def write_crl(self, days: int = 30) -> Path:
        """The CA's revocation list as it stands (empty when nothing is revoked), signed, valid ``days``."""
        _, cnf = self._ca_db()
        _openssl("ca", "-gencrl", "-config", str(cnf), "-crldays", str(days), "-out", str(self.crl), cwd=self.dir)
        return self.crl

    def _ca_db(self) -> tuple[Path, Path]:
        """openssl ca's database of revoked certificates (``index.txt``) and a configuration naming it."""
        index, cnf = self.dir / f"{self.name}-ca.index", self.dir / f"{self.name}-ca.cnf"
        if not index.exists():
            index.write_text("")
        cnf.write_text(f"[ca]\ndefault_ca = freeway_ca\n[freeway_ca]\ndatabase = {index}\ncertificate = {self.ca}\n"
                       f"private_key = {self.ca_key}\ndefault_md = sha256\ncrlnumber = {self.dir / (self.name + '-ca.crlnum')}\n")
        num = self.dir / f"{self.name}-ca.crlnum"
        if not num.exists():
            num.write_text("01\n")
        return index, cnf


def _key(path: Path) -> None:
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(path), cwd=path.parent)
    os.chmod(path, 0o600)  # (already: openssl ran under umask 077)


def fabric_pki(dir: str | Path, fabric, controller_hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
               emulated: bool = True) -> dict:
    """Everything a fabric on TLS needs, in ``dir``: a CA; the controller's certificate; one per switch;
    and, for a fabric emulated in one Open vSwitch process (``emulated``), one certificate for that
    process naming every datapath id (one process is one identity; a real fabric gets no such
    certificate: whoever held it could claim any switch). The CA's revocation list (empty) too. Returns
    the paths."""
    pki = Pki.create(dir)
    ctl = pki.issue("controller", hosts=controller_hosts)
    switches = {name: pki.issue(f"switch-{name}", dpids=(sw.dpid,)) for name, sw in fabric.switches.items()}
    out = {"ca": str(pki.ca), "crl": str(pki.write_crl() if not pki.crl.exists() else pki.crl),
           "controller": {"key": str(ctl.key), "cert": str(ctl.cert)},
           "switches": {n: {"key": str(i.key), "cert": str(i.cert)} for n, i in switches.items()}}
    if emulated:
        ovs = pki.issue("ovs", dpids=sorted(sw.dpid for sw in fabric.switches.values()))
        out["ovs"] = {"key": str(ovs.key), "cert": str(ovs.cert)}
    return out
