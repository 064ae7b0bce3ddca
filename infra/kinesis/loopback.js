// Preloaded into the Kinesis server (node -r ./loopback.js main.js): kinesis-mock has no host
// option and listens on every interface; the project's servers bind to 127.0.0.1 only.
'use strict';
const net = require('net');
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const first = args[0];
  if (first !== null && typeof first === 'object' && !Array.isArray(first) && 'port' in first) {
    args[0] = { ...first, host: process.env.KINESIS_BIND_HOST || '127.0.0.1' };
  }
  return listen.apply(this, args);
};
