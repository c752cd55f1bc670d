/* What stalkd.protocol._speedups offers other extensions (stalkd.server._conn) through the
 * capsule ``_speedups._C_API``: its parser and reply encoders without a Python call each.
 * Included by _speedups.c (which fills it) and by the extensions that import it; a change to
 * the struct bumps the version, which importers check. */
#ifndef STALKD_PROTOCOL_CAPI_H
#define STALKD_PROTOCOL_CAPI_H

#define STALKD_PROTOCOL_API_NAME "stalkd.protocol._speedups._C_API"
#define STALKD_PROTOCOL_API_VERSION 1

typedef struct {
    int version;
    PyTypeObject *parser_type;                 /* the compiled Parser */
    int (*feed)(PyObject *parser, const char *s, Py_ssize_t n);  /* -1 with an exception */
    PyObject *(*next)(PyObject *parser);       /* Parser.next(): a new reference or NULL */
    Py_ssize_t (*buffered)(PyObject *parser);  /* Parser.buffered */
    PyObject *(*encode_line)(PyObject *reply);   /* replies.encode_line */
    PyObject *(*encode_parts)(PyObject *reply);  /* replies.encode_reply_parts */
    PyObject *need_data;                       /* parser.NEED_DATA (borrowed) */
    PyObject *reply_type;                      /* commands.Reply (borrowed) */
} StalkdProtocolAPI;

#endif
