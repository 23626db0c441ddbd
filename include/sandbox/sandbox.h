/* sandbox/sandbox.h - umbrella header of libsandbox. */
#ifndef SANDBOX_SANDBOX_H
#define SANDBOX_SANDBOX_H

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

/* The library's version string, "0.1.0". */
const char *sbx_version(void);

#ifdef __cplusplus
}
#endif
#endif
