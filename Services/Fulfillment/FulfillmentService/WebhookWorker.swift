import CoreMetrics
import Foundation
import IAPProtocol
import JSONRPC
import Logging
import ServiceLifecycle

/// Delivers the event feed to webhook endpoints, through the outbox (`WebhookRecords`): each round owes every endpoint
/// the events committed since its last round (`dispatchEvents`), then sends the due (endpoint, account) items, many
/// accounts at once and each account's events one after another, in order. A failure holds back only that account's
/// events for that endpoint, tried again on `WebhookRetry`'s schedule; an account waiting `giveUpAfterMs` without progress
/// marks the endpoint failing, until an operator redelivers.
public struct WebhookWorker: FulfillmentPart {
    let service: FulfillmentService

    static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()

    /// One round; answers whether more is due at once, and whether any endpoint exists.
    @discardableResult
    public func deliverWebhooks() async throws(RPCError) -> (more: Bool, endpoints: Bool) {
        let policy = configuration.webhooks
        let endpoints = try await storeCall { try await self.store.webhooks() }
        guard !endpoints.isEmpty else { return (false, false) }
        var more = false
        let now = clock.nowMs
        for w in endpoints {
            let read = try await storeCall { try await self.store.dispatchEvents(to: w, limit: policy.dispatchBatch, nowMs: now) }
            more = more || read == policy.dispatchBatch
        }
        let byId = Dictionary(uniqueKeysWithValues: endpoints.map { ($0.id, $0) })
        let due = try await storeCall { try await self.store.dueWebhookItems(nowMs: now, limit: policy.itemsPerRound) }
        await withTaskGroup(of: Void.self) { group in
            var next = due.makeIterator()
            for _ in 0..<policy.concurrency {
                guard let item = next.next() else { break }
                group.addTask { await self.deliver(item, byId) }
            }
            while await group.next() != nil {
                if let item = next.next() { group.addTask { await self.deliver(item, byId) } }
            }
        }
        return (more || due.count == policy.itemsPerRound, true)
    }

    /// One (endpoint, account) item: the account's waiting events, in order, until one fails.
    func deliver(_ item: OutboxItem, _ endpoints: [String: WebhookRecord]) async {
        guard let space = item.key.firstIndex(of: " ") else { return }
        let endpointId = String(item.key[..<space]), accountId = String(item.key[item.key.index(after: space)...])
        do {
            guard let w = endpoints[endpointId], w.state == "active" else {
                let state = endpoints[endpointId]?.state ?? "deleted"
                try await store.parkWebhookItem(item, because: "the endpoint is \(state)")
                return
            }
            let limit = configuration.webhooks.eventsPerItem
            guard let waiting = try await store.undeliveredEvents(endpointId: endpointId, accountId: accountId, limit: limit) else {
                try await store.parkWebhookItem(item, because: "the endpoint has no record of this account")
                return
            }
            var settlement = WebhookSettlement(
                item: item, endpointId: endpointId, accountId: accountId, deliveredSequence: waiting.delivered, attempts: [], failure: nil,
                nextAttemptAtMs: 0, more: waiting.events.count == limit, progressed: false, givesUp: false)
            for event in waiting.events {
                guard w.takes(event) else {
                    settlement.deliveredSequence = event.sequence
                    settlement.progressed = true
                    continue
                }
                let (status, error, latencyMs) = await send(event, to: w)
                settlement.attempts.append(
                    WebhookDelivery(
                        eventId: event.id, accountId: accountId, sequence: event.sequence, attemptedAtMs: clock.nowMs, status: status,
                        latencyMs: latencyMs, error: error))
                if let error {
                    let now = clock.nowMs
                    settlement.failure = error
                    settlement.nextAttemptAtMs = WebhookRetry.nextAttemptAtMs(failures: item.attempts + 1, nowMs: now, jitter: .random(in: 0...1))
                    settlement.givesUp = !settlement.progressed && now - item.createdAtMs >= configuration.webhooks.giveUpAfterMs
                    settlement.more = false
                    if settlement.givesUp {
                        logger.error(
                            "a webhook endpoint has failed for an account's events for too long; marked failing until an operator redelivers",
                            metadata: ["endpoint": "\(endpointId)", "error": "\(error)"])
                    }
                    break
                }
                settlement.deliveredSequence = event.sequence
                settlement.progressed = true
            }
            try await store.settleWebhook(settlement, nowMs: clock.nowMs)
        } catch {
            // The lease brings the item back; nothing was recorded as delivered.
            logger.warning("a webhook delivery could not be recorded; will retry", metadata: ["endpoint": "\(endpointId)", "error": "\(error)"])
        }
    }

    /// One POST: (status, nil, latency) when answered 2xx; else the failure.
    private func send(_ event: FulfillmentEvent, to w: WebhookRecord) async -> (Int?, String?, Int64) {
        let started = ContinuousClock.now
        func elapsed() -> Int64 {
            let d = ContinuousClock.now - started
            return d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000
        }
        do {
            let body = Array(try Self.encoder.encode(event))
            let status = try await service.webhookSender.send(w, eventId: event.id, body: body, secrets: w.signingSecrets(nowMs: clock.nowMs))
            Timer(label: "iap_webhook_delivery_seconds").recordNanoseconds((ContinuousClock.now - started).nanoseconds)
            return (status, (200..<300).contains(status) ? nil : "answered HTTP \(status)", elapsed())
        } catch {
            return (nil, "\(error)", elapsed())
        }
    }

    /// The backlog of each endpoint: accounts waiting and how long the oldest has waited (`iap_webhook_backlog_*`).
    func recordGauges() async {
        guard let endpoints = try? await store.webhooks() else { return }
        for w in endpoints {
            guard let backlog = try? await store.webhookBacklog(w.id) else { continue }
            Gauge(label: "iap_webhook_backlog_accounts", dimensions: [("endpoint", w.id)]).record(backlog.count)
            let age = backlog.oldestMs.map { max(0, clock.nowMs - $0) } ?? 0
            Gauge(label: "iap_webhook_backlog_age_seconds", dimensions: [("endpoint", w.id)]).record(Double(age) / 1000)
        }
    }
}

extension Duration {
    var nanoseconds: Int64 { components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000 }
}

/// The webhook worker under the executable's service group: a round every `pollInterval` while endpoints exist (at
/// once when a round left more due, or an operator woke it), the backlog gauges every few seconds, and the feed's
/// retention once an hour. Its HTTP clients are shut down when it stops.
public struct WebhookWorkerService: Service {
    let service: FulfillmentService
    let logger: Logger

    public init(service: FulfillmentService, logger: Logger) {
        self.service = service
        self.logger = logger
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            var nextGauges = ContinuousClock.now, nextTrim = ContinuousClock.now
            while !Task.isCancelled {
                var wait = Duration.seconds(1)
                do {
                    let round = try await self.service.webhookWorker.deliverWebhooks()
                    if round.more { continue }
                    if round.endpoints { wait = self.service.configuration.webhooks.pollInterval }
                } catch {
                    self.logger.warning("webhook deliveries could not be read; will try again", metadata: ["error": "\(error)"])
                }
                if ContinuousClock.now >= nextGauges {
                    nextGauges = ContinuousClock.now + .seconds(5)
                    await self.service.webhookWorker.recordGauges()
                }
                if let keep = self.service.configuration.eventRetentionMs, ContinuousClock.now >= nextTrim {
                    nextTrim = ContinuousClock.now + .seconds(3600)
                    let before = self.service.clock.nowMs - keep
                    do {
                        let dropped = try await self.service.store.trimEvents(beforeMs: before)
                        if dropped > 0 { self.logger.info("events past their retention dropped", metadata: ["events": "\(dropped)"]) }
                    } catch {
                        self.logger.warning("events past their retention could not be dropped", metadata: ["error": "\(error)"])
                    }
                }
                await self.service.webhookWakeup.wait(upTo: wait)
            }
        }
        await service.webhookSender.shutdown()
    }
}
