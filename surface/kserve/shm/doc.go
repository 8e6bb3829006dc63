// Package shm holds the system shared memory regions of Triton's shared memory extension: POSIX
// shared memory objects a client creates on the server's host, registers by key, and then names
// in infer requests so tensors travel through memory instead of the socket.
//
// With WithCUDA it holds the CUDA shared memory extension's regions too: device memory a client
// exported with a CUDA IPC handle, opened by the GPU engine, which tensors are copied to and from
// (see cuda.go). Both kinds share the owners' namespaces (a name is one region, of either kind),
// the cap and the lifetime below; each kind's status and unregister calls see only its own. With
// ExclusiveObjects a handle is held as an object is, and another owner naming it is answered as
// for a handle that cannot be opened. What a CUDA region reaches is the opener's to bound: the
// manager copies only inside [0, byte_size) of what it opened.
//
// Trust model. The extension is for clients on the same host as the server. Every region has an
// owner, a namespace the caller names (the runtime passes the caller's API key): a region is found,
// listed and unregistered only through its owner's calls. With ExclusiveObjects (the runtime's
// choice with API keys on) the objects are owned too: the first owner to register an object holds
// it, by its name and by its file's identity (device and inode, so a hard link or a rename is the
// same object), until the last of its mappings of it goes; another owner naming it gets exactly
// the error a missing object gets, checked before the window is, so it can neither register
// another's object under its own region name nor learn that the object exists. Without API keys
// every caller is the same owner, as in Triton: any client that can reach the KServe surface can
// read (as an input) or overwrite (as an output) a region another client registered, by naming
// it or by registering its object. Keep keys on, or the extension off (the KServe service's
// option), wherever clients that must not see each other's tensors share a server.
//
// What a client can make the server touch: only POSIX shared memory objects, named by key (the
// name shm_open takes: an optional leading '/' and then one path element, no '/', no "." or
// ".."), opened under /dev/shm without following symbolic links, and only regular files there;
// only the bytes inside the registered window [offset, offset+byte_size), whose end is checked
// against the object's real size (fstat) at registration. It cannot name a file path, reach a
// file outside /dev/shm, or read past the registered window. It can register any object the
// server's user may open read-write, including objects other programs of that user created: run
// the server as a user whose shared memory holds nothing clients must not read.
//
// An object that shrinks after registration would make the mapped pages past its new end fault
// (SIGBUS). Every copy into or out of a mapping runs with faults turned into errors, so such a
// client gets an error, not a crashed server; tensors are therefore copied out of a region before
// a model reads them, and a model's outputs are copied into one after it has run.
//
// Lifetime: registration maps the window; unregistering removes the name at once and unmaps when
// the last in-flight request using the region has finished (a reference count), so unregistering
// during an inference is safe; an owner's hold on the object (ExclusiveObjects) goes with its last
// mapping, not with the name. Close unregisters everything. The number of regions is capped.
package shm
