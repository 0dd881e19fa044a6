# ollie.fleet.ollie_deploy: the deploy role's one step, run on the
# controller, so that the host needs no Python: only /bin/sh, coreutils
# (sha256sum, mv, chmod) and the ssh server's file transfer. It does what
# the role did with ansible.builtin modules, in ollie-remote deploy's
# layout: ~/.local/share/ollie/VERSION/olliesrv (VERSION the first 12 hex
# digits of the binary's SHA-256), data/ beside it, the current link
# switched by the new binary's own "olliesrv install commit".
#
# Round trips: one probe (home, machine, the hashes of what is installed),
# then a transfer only of what differs, each to a temporary name under
# ~/.local/share/ollie and renamed into place once its hash is checked,
# then "olliesrv ansible data" and "olliesrv install commit", which
# report what they changed. A second run transfers nothing and reports
# nothing changed.

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shlex
import tarfile
import tempfile

from ansible import constants as C
from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.action import ActionBase

ROOT = '.local/share/ollie'  # under the host's $HOME


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for chunk in iter(lambda: f.read(1 << 20), b''):
            h.update(chunk)
    return h.hexdigest()


def pack_data(src, fileobj):
    """Pack the directory src into fileobj as a tar that depends only on
    what src holds (names sorted, mtime 0, owner 0), so that its hash
    says whether the host's copy is current."""
    def clean(ti):
        ti.mtime = 0
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ''
        return ti

    with tarfile.open(fileobj=fileobj, mode='w', format=tarfile.PAX_FORMAT) as tar:
        for top, dirs, files in os.walk(src):
            dirs.sort()
            for name in sorted(dirs + files):
                path = os.path.join(top, name)
                rel = os.path.relpath(path, src)
                ti = clean(tar.gettarinfo(path, arcname=rel))
                if ti.isreg():
                    with open(path, 'rb') as f:
                        tar.addfile(ti, f)
                else:
                    tar.addfile(ti)


class ActionModule(ActionBase):

    TRANSFERS_FILES = True
    _VALID_ARGS = frozenset(('bin', 'bins', 'data', 'keep', 'backends'))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        a = self._task.args
        bins = a.get('bins') or {}
        bin_path = a.get('bin') or None
        data = a.get('data') or ''
        keep = int(a.get('keep', 3))
        backends = a.get('backends')
        check = self._task.check_mode

        if isinstance(backends, str):
            backends = json.loads(backends)
        if not (bin_path or bins or data or backends is not None):
            raise AnsibleActionFail('ollie_deploy: nothing to deploy: give bin or bins (ollie_bin, ollie_bins), data or backends')

        # Every candidate binary's hash, so that one probe can hash the
        # installed copy of whichever this host's machine picks.
        given = {'': bin_path} if bin_path else dict(bins)
        sums = {}
        for key, p in given.items():
            path = p if os.path.isabs(p) else self._find_needle('files', p)
            if not os.path.isfile(path):
                raise AnsibleActionFail('ollie_deploy: no olliesrv binary at %s' % path)
            sums[key] = (path, sha256_file(path))

        probe = self._probe(sorted(set(s[:12] for _, s in sums.values())))
        home, machine = probe['home'], probe['machine']
        root = home + '/' + ROOT
        changes = []

        if sums:
            key = '' if bin_path else machine
            if key not in sums:
                raise AnsibleActionFail('ollie_deploy: ollie_bins has no binary for %s (uname -m), and ollie_bin is not set' % machine)
            local_bin, sum_ = sums[key]
            version = sum_[:12]
            olliesrv = '%s/%s/olliesrv' % (root, version)
            if probe['bins'].get(version) != sum_:
                changes.append('%s/olliesrv' % version)
                if not check:
                    self._put(local_bin, olliesrv, sum_, '0755')
            if check and probe['current'] != version:
                # In a real run, install commit reports the switch.
                changes.append('current -> %s' % version)
        else:
            # Data or backends only: the deployed olliesrv writes them.
            version = probe['current']
            olliesrv = '%s/current/olliesrv' % root
            if not version and not check:
                raise AnsibleActionFail('ollie_deploy: no olliesrv is deployed on the host: give bin or bins')

        if data:
            data_dir = data if os.path.isabs(data) else self._find_needle('files', data)
            # A file of this run's own (mkstemp: 0600, a fresh name), so
            # that concurrent plays on one controller never share it.
            fd, tar_path = tempfile.mkstemp(prefix='ollie-data-', suffix='.tar', dir=C.DEFAULT_LOCAL_TMP)
            try:
                with os.fdopen(fd, 'wb') as f:
                    pack_data(data_dir, f)
                tar_sum = sha256_file(tar_path)
                remote_tar = root + '/.data.tar'
                if probe['datatar'] != tar_sum:
                    changes.append('.data.tar')
                    if not check:
                        self._put(tar_path, remote_tar, tar_sum, '0600')
            finally:
                os.unlink(tar_path)
            if not check:
                out = self._run('%s ansible data %s %s' % (shlex.quote(olliesrv), shlex.quote(root), shlex.quote(remote_tar)), 'olliesrv ansible data')
                changes += [c for c in out.get('changed') or [] if c not in changes]

        if sums and not check:
            plan = {'root': root, 'version': version, 'files': [], 'remove': [], 'keep': keep, 'restart': True}
            out = self._run('%s install commit' % shlex.quote(olliesrv), 'olliesrv install commit', json.dumps(plan))
            changes += out.get('changed') or []

        if backends is not None:
            # Written by olliesrv install backends from its stdin: to a
            # 0600 temporary file beside it, then renamed; the content is
            # never in argv, a command line Ansible logs, or the result.
            content = json.dumps(backends, indent=2, sort_keys=True) + '\n'
            if probe['backends'] != (hashlib.sha256(to_bytes(content)).hexdigest(), '600'):
                changes.append('backends.json')
                if not check:
                    self._run('%s install backends' % shlex.quote(olliesrv), 'olliesrv install backends', content)

        result.update(changed=bool(changes), changes=changes, version=version, machine=machine)
        return result

    def _exec(self, cmd, what, in_data=None):
        res = self._low_level_execute_command(cmd, in_data=to_bytes(in_data) if in_data is not None else None)
        if res['rc'] != 0:
            raise AnsibleActionFail('ollie_deploy: %s failed (exit %s): %s' % (what, res['rc'], to_text(res.get('stderr') or res.get('stdout')).strip()))
        return to_text(res['stdout'])

    def _run(self, cmd, what, in_data=None):
        out = self._exec(cmd, what, in_data)
        try:
            return json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        except ValueError:
            raise AnsibleActionFail('ollie_deploy: %s printed no JSON: %s' % (what, out.strip()))

    def _probe(self, versions):
        script = '''r="$HOME/%(root)s"; c="${XDG_CONFIG_HOME:-$HOME/.config}/ollie/backends.json"
sum() { sha256sum < "$1" | cut -c1-64; }
printf 'home %%s\\n' "$HOME"
printf 'machine %%s\\n' "$(uname -m)"
printf 'current %%s\\n' "$(basename "$(readlink "$r/current" 2>/dev/null)" 2>/dev/null)"
for v in %(versions)s; do [ -f "$r/$v/olliesrv" ] && printf 'bin %%s %%s\\n' "$v" "$(sum "$r/$v/olliesrv")"; done
[ -f "$r/.data.tar" ] && printf 'datatar %%s\\n' "$(sum "$r/.data.tar")"
[ -f "$c" ] && printf 'backends %%s %%s\\n' "$(sum "$c")" "$(stat -c %%a "$c")"
exit 0''' % {'root': ROOT, 'versions': ' '.join(shlex.quote(v) for v in versions) or '""'}
        out = self._exec('/bin/sh -c %s' % shlex.quote(script), 'probing the host')
        p = {'home': '', 'machine': '', 'current': '', 'bins': {}, 'datatar': None, 'backends': None}
        for line in out.splitlines():
            key, _, rest = line.partition(' ')
            if key in ('home', 'machine', 'current', 'datatar'):
                p[key] = rest.strip()
            elif key == 'bin':
                v, _, s = rest.partition(' ')
                p['bins'][v] = s.strip()
            elif key == 'backends':
                p['backends'] = tuple(rest.split()[:2])
        if not p['home'].startswith('/') or not p['machine']:
            raise AnsibleActionFail('ollie_deploy: the probe found no home or machine: %s' % out.strip())
        if p['current'] == '.':
            p['current'] = ''
        return p

    def _put(self, local, remote, sum_, mode):
        """Send local to a temporary name beside remote, check its hash
        there, and rename it into place."""
        tmp = '%s/.ollie-put-%s' % (os.path.dirname(remote), secrets.token_hex(6))
        self._exec('mkdir -p %s' % shlex.quote(os.path.dirname(remote)), 'making ' + os.path.dirname(remote))
        try:
            self._connection.put_file(local, tmp)
            q, qr = shlex.quote(tmp), shlex.quote(remote)
            self._exec('chmod %s %s && [ "$(sha256sum < %s | cut -c1-64)" = %s ] && mv -f %s %s'
                       % (mode, q, q, sum_, q, qr), 'installing ' + remote)
        except Exception:
            self._low_level_execute_command('rm -f %s' % shlex.quote(tmp))
            raise
