/*
 * rdma_cm addresses: (host, port) <-> struct sockaddr, for
 * CMID.bind_addr/resolve_addr/listen and the generated
 * CMID.local_addr/peer_addr getters.
 */
#include "common.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

/* (host, port), or host alone (port 0); host is a numeric IPv4/IPv6
 * address, '' for any.  None gives an all-zero (unset) address when
 * none_ok; returns 0 with *set = 0 then. */
int ibp_cm_conv_addr(PyObject *obj, const char *name, struct sockaddr_storage *out,
                     int none_ok, int *set)
{
    memset(out, 0, sizeof(*out));
    *set = 0;
    if (obj == Py_None && none_ok)
        return 0;
    PyObject *host_obj = obj, *port_obj = NULL;
    if (PyTuple_Check(obj)) {
        if (PyTuple_Size(obj) != 2) {
            PyErr_Format(PyExc_ValueError, "%s must be (host, port) or host, got a "
                         "tuple of %zd", name, PyTuple_Size(obj));
            return -1;
        }
        host_obj = PyTuple_GetItem(obj, 0);
        port_obj = PyTuple_GetItem(obj, 1);
    }
    if (!PyUnicode_Check(host_obj)) {
        PyErr_Format(PyExc_TypeError, "%s: the host must be a str (a numeric IP "
                     "address), not %s", name, ibp_type_name(host_obj));
        return -1;
    }
    uint64_t port = 0;
    if (port_obj != NULL && ibp_conv_unsigned(port_obj, "port", UINT16_MAX, &port) < 0)
        return -1;
    const char *host;
    PyObject *host_bytes = ibp_conv_str(host_obj, name, &host);
    if (host_bytes == NULL)
        return -1;
    int rc = 0;
    struct sockaddr_in *in4 = (struct sockaddr_in *)out;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)out;
    if (*host == '\0') {
        in4->sin_family = AF_INET;
        in4->sin_addr.s_addr = htonl(INADDR_ANY);
        in4->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
    } else {
        PyErr_Format(PyExc_ValueError, "%s: %R is not a numeric IPv4 or IPv6 address",
                     name, host_obj);
        rc = -1;
    }
    Py_DECREF(host_bytes);
    if (rc == 0)
        *set = 1;
    return rc;
}

/* (host, port), or None for an unset address. */
PyObject *ibp_sockaddr_to_py(const struct sockaddr *sa)
{
    char text[INET6_ADDRSTRLEN];
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in4 = (const struct sockaddr_in *)sa;
        if (inet_ntop(AF_INET, &in4->sin_addr, text, sizeof(text)) == NULL)
            return ibp_raise("inet_ntop", errno);
        return Py_BuildValue("(si)", text, (int)ntohs(in4->sin_port));
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        if (inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text)) == NULL)
            return ibp_raise("inet_ntop", errno);
        return Py_BuildValue("(si)", text, (int)ntohs(in6->sin6_port));
    }
    Py_RETURN_NONE;
}
