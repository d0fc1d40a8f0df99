import ArgumentParser
import Foundation
import IAPProtocol
import JSONRPC

/// `iap events ...`: the event feed.
struct EventsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "events", abstract: "The event feed: every change of a customer's money or access (docs/events.md).",
        subcommands: [Tail.self])

    struct Tail: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "fulfillment.listEvents: the events after a cursor, in commit order; --follow keeps reading as they commit.",
            discussion: """
                Catch up after downtime by passing the last cursor you acted on (--after); every event after it comes, none \
                skipped. --json prints one event object per line (the body a webhook delivers).
                """)
        @Option(help: "Start after this cursor (default 0: the first event kept).") var after = "0"
        @Option(help: "Only this account's events.") var account: String?
        @Option(name: .customLong("type"), help: "Only these types (repeat), e.g. purchase.refunded.") var types: [FulfillmentEventType] = []
        @Option(help: "Events per read (1-1000, default 100).") var limit: Int?
        @Flag(help: "Keep reading: wait for new events (a read every second when there are none).") var follow = false
        @OptionGroup var token: AdminTokenOption
        @OptionGroup var client: ClientOptions

        func run() async throws {
            let call = ServiceCall(options: client), adminToken = try token.resolved()
            var cursor = after
            while true {
                let (page, _) = await call.call(
                    .fulfillment, FulfillmentListEvents.self,
                    .init(adminToken: adminToken, after: cursor, limit: limit, accountId: account, types: types.isEmpty ? nil : types))
                for event in page.events { print(client.json ? Self.json(event) : Self.line(event)) }
                cursor = page.next
                if page.events.count == (limit ?? 100) { continue }
                guard follow else {
                    if !client.json { print("next: \(cursor)") }
                    return
                }
                try await Task.sleep(for: .seconds(1))
            }
        }

        static func json(_ event: FulfillmentEvent) -> String {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            return (try? String(decoding: encoder.encode(event), as: UTF8.self)) ?? "{}"
        }

        static func line(_ e: FulfillmentEvent) -> String {
            var parts = [e.cursor, isoTime(e.occurredAtMs), e.accountId, "#\(e.sequence)", e.type.rawValue, e.environment]
            if let p = e.productId { parts.append(p) }
            if let d = e.delta { parts.append("delta \(d)") }
            parts.append("balance \(e.balance)")
            if e.owed > 0 { parts.append("owed \(e.owed)") }
            if let name = e.entitlement { parts.append("\(name) until \(e.entitlementEndsAtMs.map { isoTime($0) } ?? "forever")") }
            if let r = e.reason { parts.append("(\(r))") }
            return parts.joined(separator: "  ")
        }
    }
}

extension FulfillmentEventType: ExpressibleByArgument {}

/// `iap webhooks ...`: endpoints that receive the event feed, signed (Standard Webhooks).
struct WebhooksCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "webhooks", abstract: "Webhook endpoints: the event feed delivered to your backend, signed (docs/events.md).",
        subcommands: [Add.self, List.self, Rotate.self, Pause.self, Delete.self, Redeliver.self, Deliveries.self])

    static func describe(_ w: WebhookEndpoint) -> [String] {
        [
            w.id, w.state, w.url, w.types?.map(\.rawValue).joined(separator: ",") ?? "all", w.environments?.joined(separator: ",") ?? "all",
            String(w.backlog), w.oldestWaitingSinceMs.map { isoTime($0) } ?? "-", w.lastError ?? "-",
        ]
    }
    static let header = ["id", "state", "url", "types", "environments", "waiting", "since", "last error"]

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "fulfillment.addWebhook: deliver events from now on to URL; prints the secret ONCE (keep it: it is never shown again).")
        @Argument(help: "https://... (a private, loopback or link-local address only with --allow-private-address).") var url: String
        @Option(name: .customLong("type"), help: "Only these types (repeat).") var types: [FulfillmentEventType] = []
        @Option(name: .customLong("environment"), help: "Only these environments (repeat): Production, Sandbox, Xcode.") var environments: [String] =
            []
        @Flag(name: .customLong("allow-private-address"), help: "Allow a private, loopback or link-local address (a receiver on your own network).")
        var allowPrivate = false
        @OptionGroup var token: AdminTokenOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .fulfillment, FulfillmentAddWebhook.self,
                .init(
                    adminToken: try token.resolved(), url: url, types: types.isEmpty ? nil : types,
                    environments: environments.isEmpty ? nil : environments,
                    allowPrivateAddress: allowPrivate ? true : nil)
            ) { "webhook \($0.id)\nsecret \($0.secret)\n(shown once: verify deliveries with it; rotate with iap webhooks rotate \($0.id))" }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "fulfillment.listWebhooks: the endpoints, their state and what waits for them.")
        @OptionGroup var token: AdminTokenOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(.fulfillment, FulfillmentListWebhooks.self, .init(adminToken: try token.resolved())) {
                $0.webhooks.isEmpty ? "no webhook endpoints" : table(WebhooksCommand.header, $0.webhooks.map(WebhooksCommand.describe))
            }
        }
    }

    struct Rotate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "fulfillment.rotateWebhookSecret: a new secret, printed once; the old one keeps signing beside it for 24 hours.")
        @Argument var id: String
        @OptionGroup var token: AdminTokenOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(.fulfillment, FulfillmentRotateWebhookSecret.self, .init(adminToken: try token.resolved(), id: id))
            {
                "secret \($0.secret)\n(shown once; the old secret also signs until \(isoTime($0.previousSecretValidUntilMs)))"
            }
        }
    }

    struct Pause: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "fulfillment.pauseWebhook: stop deliveries (events wait for it); --resume starts them again.")
        @Argument var id: String
        @Flag var resume = false
        @OptionGroup var token: AdminTokenOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .fulfillment, FulfillmentPauseWebhook.self, .init(adminToken: try token.resolved(), id: id, paused: resume ? false : true)
            ) { table(WebhooksCommand.header, [WebhooksCommand.describe($0)]) }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "fulfillment.deleteWebhook: remove an endpoint and what waits for it.")
        @Argument var id: String
        @OptionGroup var token: AdminTokenOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(.fulfillment, FulfillmentDeleteWebhook.self, .init(adminToken: try token.resolved(), id: id)) {
                _ in "deleted \(id)"
            }
        }
    }

    struct Redeliver: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "fulfillment.redeliverWebhook: send every event after a cursor again (and make a failing or paused endpoint active).")
        @Argument var id: String
        @Option(help: "The cursor to start after (0: every event kept).") var after: String
        @OptionGroup var token: AdminTokenOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .fulfillment, FulfillmentRedeliverWebhook.self, .init(adminToken: try token.resolved(), id: id, after: after)
            ) { "\($0.accounts) account(s) owed their events after \(after) again" }
        }
    }

    struct Deliveries: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "fulfillment.listDeliveries: an endpoint's attempts, newest first, with status and latency.")
        @Argument var id: String
        @Option(help: "At most this many (1-1000, default 100).") var limit: Int?
        @OptionGroup var token: AdminTokenOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .fulfillment, FulfillmentListDeliveries.self, .init(adminToken: try token.resolved(), id: id, limit: limit)
            ) {
                $0.deliveries.isEmpty
                    ? "no delivery attempts"
                    : table(
                        ["event", "at", "status", "latency", "error"],
                        $0.deliveries.map {
                            [$0.eventId, isoTime($0.attemptedAtMs), $0.status.map(String.init) ?? "-", "\($0.latencyMs) ms", $0.error ?? "-"]
                        })
            }
        }
    }
}
