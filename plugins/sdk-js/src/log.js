/**
 * The `log` import: messages to the host's log. The host limits the size and rate of
 * messages and may drop some; a message must never contain row values or secrets.
 *
 * In a component built with `weir-plugin-bundle`, messages go to the
 * `weir:transform/log` import (the bundle binds it as `__weirHostLog`); run natively
 * (tests), they go to stderr. Do not log while the module loads: a component's
 * module runs when it is built, where there is no host.
 */

/* global __weirHostLog */
const hostLog = typeof __weirHostLog === 'function' ? __weirHostLog : null;

function write(level, message) {
  const text = String(message);
  if (hostLog !== null) {
    hostLog(level, text);
  } else {
    console.error(`[${level}] ${text}`);
  }
}

/** Logs at a level: `log.trace`, `log.debug`, `log.info`, `log.warn`, `log.error`. */
export const log = Object.freeze({
  trace: (message) => write('trace', message),
  debug: (message) => write('debug', message),
  info: (message) => write('info', message),
  warn: (message) => write('warn', message),
  error: (message) => write('error', message),
});
