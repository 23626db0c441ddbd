/* sandbox/sandbox.h - umbrella header of libsandbox. */
#ifndef SANDBOX_SANDBOX_H
#define SANDBOX_SANDBOX_H

#include <sandbox/version.h>
#include <sandbox/error.h>
#include <sandbox/core.h>
#include <sandbox/wire.h>
#include <sandbox/agent.h>
#include <sandbox/driver.h>
#include <sandbox/pool.h>
#include <sandbox/client.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the library loaded at run time: "0.1.0", and the same as
 * 0xMMmmpp (compare with SBX_VERSION_NUM, the headers' version). */
const char *sbx_version(void);
unsigned sbx_version_num(void);

#ifdef __cplusplus
}
#endif
#endif
