// @a2a-js/sdk 1.3's client against the bridge, on each binding, as its docs start it.
//
//     node driver.mjs BRIDGE_URL WEBHOOK_URL
//
// Installed in its own node_modules (package-lock.json beside this file). The same scenario
// as the Python drivers: a blocking send, get, a streamed send, a task resubscribed and
// cancelled, a question answered by a streamed reply with a push config registered on the
// task. Prints one JSON object (see tests/test_interop_clients.py).
import { randomUUID } from "node:crypto";
import { ClientFactory, ClientFactoryOptions } from "@a2a-js/sdk/client";
import { Role, TaskState } from "@a2a-js/sdk";

const [base, webhook] = process.argv.slice(2);
const STATES = {
  [TaskState.TASK_STATE_SUBMITTED]: "submitted",
  [TaskState.TASK_STATE_WORKING]: "working",
  [TaskState.TASK_STATE_COMPLETED]: "completed",
  [TaskState.TASK_STATE_FAILED]: "failed",
  [TaskState.TASK_STATE_CANCELED]: "canceled",
  [TaskState.TASK_STATE_INPUT_REQUIRED]: "input-required",
  [TaskState.TASK_STATE_REJECTED]: "rejected",
};

function message(text, taskId) {
  return {
    messageId: randomUUID(),
    role: Role.ROLE_USER,
    parts: [{ content: { $case: "text", value: text } }],
    ...(taskId ? { taskId } : {}),
  };
}

const texts = (parts) =>
  (parts || []).map((p) => (p.content?.$case === "text" ? p.content.value : "")).join("");
const artifactText = (task, id) =>
  (task.artifacts || []).filter((a) => a.artifactId === id).map((a) => texts(a.parts)).join("");
const state = (task) => STATES[task.status?.state] ?? String(task.status?.state);

function record(event) {
  const payload = event.payload;
  switch (payload?.$case) {
    case "task":
      return { kind: "task", id: payload.value.id };
    case "statusUpdate":
      return { kind: "status", state: state(payload.value) };
    case "artifactUpdate": {
      const update = payload.value;
      return {
        kind: "artifact",
        id: update.artifact.artifactId,
        append: Boolean(update.append),
        lastChunk: Boolean(update.lastChunk),
        text: texts(update.artifact.parts),
      };
    }
    default:
      return { kind: payload?.$case ?? "unknown" };
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
  out.send = { state: state(sent), answer: artifactText(sent, "answer"), task_id: sent.id };
  const got = await client.getTask({ id: sent.id });
  out.get = {
    state: state(got),
    answer: artifactText(got, "answer"),
    changes: artifactText(got, "changes"),
    report: got.metadata?.report ?? null,
  };
  out.stream = await read(client.sendMessageStream({ message: message("hello") }));

  // A task that keeps running: resubscribe to it, cancel it.
  const first = client.sendMessageStream({ message: message("long") });
  const head = (await first.next()).value;
  await first.return();
  const taskId = head.payload.value.id;
  const resubscribed = read(client.resubscribeTask({ id: taskId }));
  const cancelled = await client.cancelTask({ id: taskId });
  out.cancel = { state: state(cancelled), resubscribed: await resubscribed };

  // A question: the task waits; a webhook is registered; a streamed reply answers it.
  const asked = await client.sendMessage({ message: message("ask") });
  await client.createTaskPushNotificationConfig({
    taskId: asked.id,
    id: "hook-1",
    url: `${webhook}?c=${encodeURIComponent(binding)}`,
    token: "tok-js",
  });
  const fetched = await client.getTaskPushNotificationConfig({ taskId: asked.id, id: "hook-1" });
  const answered = await read(
    client.sendMessageStream({ message: message("blue", asked.id) }),
  );
  out.question = {
    asked: { state: state(asked), answer: artifactText(asked, "answer"), task_id: asked.id },
    push_url: fetched.url,
    answered,
  };
  return out;
}

const report = {};
for (const binding of ["JSONRPC", "HTTP+JSON"]) report[binding] = await scenario(binding);
console.log(JSON.stringify(report));
