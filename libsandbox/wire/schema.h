/* Internal: the data-driven description of every frame. One table per
 * request op and response type lists its members in fixture order with
 * their C type and place; the encoder and the decoder are written once over
 * these tables (as curl keeps its option tables), so adding a field is one
 * line here. */
#ifndef SBX_WIRE_SCHEMA_H
#define SBX_WIRE_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include <sandbox/wire.h>

typedef enum {
  FT_STR,  /* const char * (NULL = absent) */
  FT_STRV, /* sbx_wire_strv */
  FT_MAP,  /* sbx_wire_map */
  FT_BOOL, /* bool */
  FT_U16,
  FT_U32,
  FT_U64,
  FT_I32,
  FT_B64,  /* sbx_wire_bytes */
  FT_ENUM, /* an int-sized C enum; aux = const sbx_wire_enum * */
  FT_OBJ,  /* a nested struct in place; aux = const wire_desc * */
  FT_OBJV, /* T *items at off, size_t len at aux_off; aux = const wire_desc * */
} field_type;

enum {
  FF_REQUIRED = 1,  /* missing or null is a parse failure */
  FF_ONLY_TRUE = 2, /* bool emitted only when true (git_status_result.truncated) */
  FF_IFF_EXITED = 4 /* ProcInfo.exit_code: emitted iff state == exited */
};

typedef struct wire_field {
  const char *name;
  uint8_t name_len;
  uint8_t type;
  uint8_t flags;
  uint16_t off;     /* offset of the value within the owning struct */
  int16_t aux_off;  /* optional scalars: offset of the has_ flag; FT_OBJV: of the length; else -1 */
  const void *aux;
} wire_field;

typedef struct wire_desc {
  const char *tag; /* op name, type name, or object name for errors */
  uint8_t tag_len;
  uint8_t nfields;
  uint16_t size; /* sizeof the C struct (for FT_OBJV elements) */
  const wire_field *fields;
} wire_desc;

extern const wire_desc sbxi_req_desc[SBX_OP__COUNT];
extern const wire_desc sbxi_resp_desc[SBX_RESP__COUNT];
extern const sbx_wire_enum sbxi_enum_proc_state;

#endif
