# The controller half of ollie.fleet.ollie_goal: it runs the module as
# Ansible runs any WANT_JSON module (the /bin/sh wrapper and an
# arguments file in the remote tmp directory), except that the become
# password is taken out of the arguments and written to the module's
# standard input. So the password is never in a file, on the host
# (~/.ansible/tmp/.../args) or on the controller (ANSIBLE_LOCAL_TEMP,
# where _transfer_data stages what it sends): only in this process's
# memory, the ssh connection's pipe, and olliesrv's memory.

from __future__ import annotations

import json

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.parameters import remove_values
from ansible.module_utils.common.text.converters import to_bytes
from ansible.plugins.action import ActionBase
from ansible.vars.clean import remove_internal_keys

MODULE = 'ollie.fleet.ollie_goal'


class ActionModule(ActionBase):

    TRANSFERS_FILES = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        if self._task.async_val:
            raise AnsibleActionFail('ollie_goal does not run async: give it a timeout instead')

        args = dict(self._task.args)
        password = args.pop('become_password', None)
        if password:
            # olliesrv ansible goal reads the password from stdin only
            # when told so: without this plugin there is none to read.
            args['_ollie_password_stdin'] = True
        try:
            res = self._run_module(args, task_vars or {}, password)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        if password:
            # Whatever the module said, the password does not leave in
            # the result (nor, so, in -v output or a registered var).
            res = remove_values(res, {password})
        result.update(res)
        return result

    def _run_module(self, args, task_vars, password):
        self._update_module_args(MODULE, args, task_vars)
        style, shebang, data, path = self._configure_module(module_name=MODULE, module_args=args, task_vars=task_vars)
        if style != 'non_native_want_json':
            raise AnsibleActionFail('%s is a %s module, not the WANT_JSON wrapper this plugin runs' % (path, style))

        tmpdir = self._connection._shell.tmpdir or self._make_tmp_path()
        shell = self._connection._shell
        module_path = shell.join_path(tmpdir, 'AnsiballZ_ollie_goal')
        args_path = shell.join_path(tmpdir, 'args')
        self._transfer_data(module_path, data)
        self._transfer_data(args_path, json.dumps(args))
        self._fixup_perms2([tmpdir, module_path, args_path], self._get_remote_user())

        cmd = shell.build_module_command(self._compute_environment_string(), shebang, module_path, arg_path=args_path).strip()
        # in_data goes to the remote process's stdin through the
        # connection (ssh's pipe); Ansible logs its length, never its bytes.
        in_data = to_bytes(password, errors='surrogate_or_strict') if password else None
        res = self._low_level_execute_command(cmd, in_data=in_data)
        out = self._parse_returned_data(res)
        remove_internal_keys(out)
        return out
