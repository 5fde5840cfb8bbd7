// @a2a-js/sdk 0.3's client against the bridge, on each binding, as its docs start it.
//
//     node driver.mjs BRIDGE_URL WEBHOOK_URL
//
// Installed in its own node_modules (package-lock.json beside this file). `createFromUrl`
// reads the card at /.well-known/agent-card.json, so this is also the test that a 0.3 client
// discovers the bridge with no setting. The same scenario as the other drivers; prints one
// JSON object (see tests/test_interop_clients.py).
import { randomUUID } from "node:crypto";
import { ClientFactory, ClientFactoryOptions } from "@a2a-js/sdk/client";

const [base, webhook] = process.argv.slice(2);

function message(text, taskId) {
  return {
    kind: "message",
    messageId: randomUUID(),
    role: "user",
    parts: [{ kind: "text", text }],
    ...(taskId ? { taskId } : {}),
  };
}

const texts = (parts) => (parts || []).map((p) => (p.kind === "text" ? p.text : "")).join("");
const artifactText = (task, id) =>
  (task.artifacts || []).filter((a) => a.artifactId === id).map((a) => texts(a.parts)).join("");

function record(event) {
  switch (event.kind) {
    case "task":
      return { kind: "task", id: event.id };
    case "status-update":
      return { kind: "status", state: event.status.state };
    case "artifact-update":
      return {
        kind: "artifact",
        id: event.artifact.artifactId,
        append: Boolean(event.append),
        lastChunk: Boolean(event.lastChunk),
        text: texts(event.artifact.parts),
      };
    default:
      return { kind: event.kind };
  }
}

async function read(stream) {
  const events = [];
  for await (const event of stream) events.push(record(event));
  return { events };
}

async function scenario(binding) {
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      preferredTransports: [binding],
    }),
  );
  const client = await factory.createFromUrl(base);
  const out = {};
  const sent = await client.sendMessage({ message: message("hello") });
  out.send = { state: sent.status.state, answer: artifactText(sent, "answer"), task_id: sent.id };
  const got = await client.getTask({ id: sent.id });
  out.get = {
    state: got.status.state,
    answer: artifactText(got, "answer"),
    changes: artifactText(got, "changes"),
    report: got.metadata?.report ?? null,
  };
  out.stream = await read(client.sendMessageStream({ message: message("hello") }));

  // A task that keeps running: resubscribe to it, cancel it.
  const first = client.sendMessageStream({ message: message("long") });
  const head = (await first.next()).value;
  await first.return();
  const resubscribed = read(client.resubscribeTask({ id: head.id }));
  const cancelled = await client.cancelTask({ id: head.id });
  out.cancel = { state: cancelled.status.state, resubscribed: await resubscribed };

  // A question: the task waits; a webhook is registered; a streamed reply answers it.
  const asked = await client.sendMessage({ message: message("ask") });
  await client.setTaskPushNotificationConfig({
    taskId: asked.id,
    pushNotificationConfig: {
      id: "hook-1",
      url: `${webhook}?c=${encodeURIComponent(binding)}`,
      token: "tok-js",
    },
  });
  const fetched = await client.getTaskPushNotificationConfig({
    id: asked.id,
    pushNotificationConfigId: "hook-1",
  });
  const answered = await read(
    client.sendMessageStream({ message: message("blue", asked.id) }),
  );
  out.question = {
    asked: { state: asked.status.state, answer: artifactText(asked, "answer"), task_id: asked.id },
    push_url: fetched.pushNotificationConfig.url,
    answered,
  };
  return out;
}

const report = {};
for (const binding of ["JSONRPC", "HTTP+JSON"]) report[binding] = await scenario(binding);
console.log(JSON.stringify(report));
