/* zygote.h - silkd's --zygote mode (zygote.c) and the serving entry point
 * it shares with main (main.c). */
#ifndef SILKD_ZYGOTE_H
#define SILKD_ZYGOTE_H

/* main without the zygote switch: parse argv, listen, run the loop. */
int silkd_run(int argc, char **argv);
/* silkd --zygote fd:N */
int silkd_zygote_main(int argc, char **argv);

#endif
