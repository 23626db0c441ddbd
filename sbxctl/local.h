/* sbxctl local commands: a sandbox driven straight through libsandbox's
 * drivers on this machine, no sandboxd involved. */
#ifndef SBXCTL_LOCAL_H
#define SBXCTL_LOCAL_H

/* argv[0] = "local". Exit status: ARGV's own code for `run`, 2 for a usage
 * error, 125 when the sandbox could not be made or reached. */
int sbxctl_local_main(int argc, char **argv);

#endif
