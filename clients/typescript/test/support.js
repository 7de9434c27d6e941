// What the loopback tests share: a free port on 127.0.0.1.
import { createServer } from "node:net";

/** A port nothing listens on now (the worker under test binds it next). */
export function freePort() {
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}
