//! What a run's command sees: its FLEET_* variables, the project's and the daemon's
//! environment (the project's wins), and /dev/null on stdin.

use crate::common::*;

#[test]
fn command_sees_its_environment_and_dev_null_stdin() {
    let f = Fleet::new(&format!(
        "[namespaces.ops]\nmax_concurrency = 2\n\
         [projects.envy]\nnamespace = \"ops\"\ntimeout = \"30s\"\n\
         env = {{ GREETING = \"hi there\", OVERRIDDEN = \"by project\" }}\n\
         command = {}\n",
        sh(
            "echo RUN=$FLEET_RUN_ID; echo PROJECT=$FLEET_PROJECT; echo NS=$FLEET_NAMESPACE; \
            echo ATTEMPT=$FLEET_ATTEMPT; echo GREETING=$GREETING; echo OVERRIDDEN=$OVERRIDDEN; \
            echo INHERITED=$FROM_DAEMON; echo OCCURRENCE=${FLEET_OCCURRENCE-unset}; \
            echo STDIN=$(readlink /proc/$$/fd/0); \
            echo CAT=[$(cat)] rc=$?; echo done"
        )
    ));
    let _d = f.start_daemon_env(&[("FROM_DAEMON", "yes"), ("OVERRIDDEN", "by daemon")]);
    let id = f.enqueue("envy");
    let r = f.wait_terminal(id);
    assert_eq!(status_of(&r), "succeeded", "{r}\n{}", f.logs(id));
    let log = f.logs(id);
    let expected = format!(
        "RUN={id}\nPROJECT=envy\nNS=ops\nATTEMPT=1\nGREETING=hi there\nOVERRIDDEN=by project\n\
         INHERITED=yes\nOCCURRENCE=unset\nSTDIN=/dev/null\nCAT=[] rc=0\ndone\n"
    );
    assert_eq!(log, expected);
    assert_eq!(r["namespace"], "ops");
}
