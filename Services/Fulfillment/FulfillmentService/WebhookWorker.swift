import CoreMetrics
import Foundation
import IAPProtocol
import JSONRPC
import Logging
import NIOConcurrencyHelpers
import ServiceLifecycle

/// Delivers the event feed to webhook endpoints, through the outbox (`WebhookRecords`): each round owes every endpoint
/// the events committed since its last round (`dispatchEvents`), then sends the due (endpoint, account) items, many
/// accounts at once and each account's events one after another, in order. A failure holds back only that account's
/// events for that endpoint, tried again on `WebhookRetry`'s schedule; an account waiting `giveUpAfterMs` without progress
/// marks the endpoint failing, until an operator redelivers.
public struct WebhookWorker: FulfillmentPart {
    let service: FulfillmentService

    /// Owes every endpoint the events committed since it was last given some; true when a whole batch was read (more
    /// is waiting).
    func dispatch(_ endpoints: [WebhookRecord]) async throws(RPCError) -> Bool {
        let policy = configuration.webhooks, now = clock.nowMs
        var more = false
        for w in endpoints {
            let read = try await storeCall { try await self.store.dispatchEvents(to: w, limit: policy.dispatchBatch, nowMs: now) }
            more = more || read == policy.dispatchBatch
        }
        return more
    }

    /// Claims up to `limit` of an active endpoint's due items for the lease.
    func claim(_ w: WebhookRecord, limit: Int) async throws(RPCError) -> [OutboxItem] {
        guard w.state == "active", limit > 0 else { return [] }
        let policy = configuration.webhooks, now = clock.nowMs
        return try await storeCall {
            try await self.store.dueWebhookItems(endpointId: w.id, nowMs: now, limit: limit, leaseMs: policy.leaseMs)
        }
    }

    /// One whole round, waiting for every delivery it starts (tests drive the worker with it, step by step; the
    /// service's worker, `WebhookWorkerService`, pipelines instead). Answers whether more is due at once, and whether any endpoint exists.
    @discardableResult
    public func deliverWebhooks() async throws(RPCError) -> (more: Bool, endpoints: Bool) {
        let policy = configuration.webhooks
        let endpoints = try await storeCall { try await self.store.webhooks() }
        guard !endpoints.isEmpty else { return (false, false) }
        var more = try await dispatch(endpoints)
        for w in endpoints {
            let claimed = ContinuousClock.now  // before the claim: its lease may have begun as soon as it was asked
            let due = try await claim(w, limit: policy.itemsPerRound)
            more = more || due.count == policy.itemsPerRound
            await withTaskGroup(of: Void.self) { group in
                var next = due.makeIterator()
                for _ in 0..<policy.concurrency {
                    guard let item = next.next() else { break }
                    group.addTask { await self.deliver(item, to: w, claimedAt: claimed) }
                }
                while await group.next() != nil {
                    if let item = next.next() { group.addTask { await self.deliver(item, to: w, claimedAt: claimed) } }
                }
            }
        }
        return (more, true)
    }

    /// One (endpoint, account) item: the account's waiting events, in order, until one fails or the lease's time for
    /// starting requests (`WebhookPolicy.leaseMs`) runs out.
    func deliver(_ item: OutboxItem, to w: WebhookRecord, claimedAt: ContinuousClock.Instant) async {
        guard let space = item.key.firstIndex(of: " ") else { return }
        let accountId = String(item.key[item.key.index(after: space)...])
        let policy = configuration.webhooks
        let deadline = claimedAt + .milliseconds(max(0, policy.leaseMs - policy.requestTimeoutMs - 5_000))
        do {
            guard ContinuousClock.now < deadline else {
                try await store.releaseWebhookItem(item, nowMs: clock.nowMs)
                return
            }
            guard let waiting = try await store.undeliveredEvents(endpointId: w.id, accountId: accountId, limit: policy.eventsPerItem) else {
                return  // the endpoint was deleted meanwhile: its items went with it
            }
            var settlement = WebhookSettlement(
                item: item, endpointId: w.id, accountId: accountId, deliveredSequence: waiting.delivered, generation: waiting.generation,
                attempts: [], failure: nil, nextAttemptAtMs: 0, more: waiting.events.count == policy.eventsPerItem, progressed: false,
                givesUp: false)
            for event in waiting.events {
                guard ContinuousClock.now < deadline else {
                    settlement.more = true  // the rest in a new lease
                    break
                }
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
                    // A failure after progress in this round is a first failure: retried within a second, not on the old
                    // failures' hourly schedule (until 2026-11-30 it waited up to an hour).
                    settlement.nextAttemptAtMs = WebhookRetry.nextAttemptAtMs(
                        failures: settlement.progressed ? 1 : item.attempts + 1, nowMs: now, jitter: .random(in: 0...1))
                    settlement.givesUp = !settlement.progressed && now - item.createdAtMs >= policy.giveUpAfterMs
                    settlement.more = false
                    if settlement.givesUp {
                        logger.error(
                            "a webhook endpoint has failed for an account's events for too long; marked failing until an operator redelivers",
                            metadata: ["endpoint": "\(w.id)", "error": "\(error)"])
                    }
                    break
                }
                settlement.deliveredSequence = event.sequence
                settlement.progressed = true
            }
            try await store.settleWebhook(settlement, nowMs: clock.nowMs)
        } catch {
            // The lease brings the item back; nothing was recorded as delivered.
            logger.warning("a webhook delivery could not be recorded; will retry", metadata: ["endpoint": "\(w.id)", "error": "\(error)"])
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
            let body = try JSONByteEncoder.encode(event)  // the bytes listEvents answers for the event
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

/// The webhook worker under the executable's service group. Every `pollInterval` while endpoints exist (at once when a
/// batch was full, or an operator woke it) it owes endpoints the new events and claims due items, at most
/// `WebhookPolicy.concurrency` in flight per endpoint, without waiting for the ones in flight: a slow or silent endpoint
/// holds only its own slots. The backlog gauges every few seconds; the feed's retention and the delivery log's (seven
/// days) once an hour. Its HTTP clients are shut down when it stops.
public struct WebhookWorkerService: Service {
    let service: FulfillmentService
    let logger: Logger

    public init(service: FulfillmentService, logger: Logger) {
        self.service = service
        self.logger = logger
    }

    public func run() async throws {
        let worker = service.webhookWorker, policy = service.configuration.webhooks
        let inFlight = NIOLockedValueBox<[String: Int]>([:])
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                var nextGauges = ContinuousClock.now, nextTrim = ContinuousClock.now
                while !Task.isCancelled {
                    var wait = Duration.seconds(1), more = false
                    do {
                        let endpoints = try await self.service.store.webhooks()
                        await self.service.webhookSender.keep(only: Set(endpoints.map(\.id)))
                        if !endpoints.isEmpty { wait = policy.pollInterval }
                        more = try await worker.dispatch(endpoints)
                        for w in endpoints {
                            let free = policy.concurrency - inFlight.withLockedValue { $0[w.id, default: 0] }
                            let claimed = ContinuousClock.now  // before the claim, as above
                            let items = try await worker.claim(w, limit: free)
                            more = more || (free > 0 && items.count == free)
                            for item in items {
                                inFlight.withLockedValue { $0[w.id, default: 0] += 1 }
                                group.addTask {
                                    await worker.deliver(item, to: w, claimedAt: claimed)
                                    let left = inFlight.withLockedValue { n in
                                        n[w.id, default: 0] -= 1
                                        return n[w.id, default: 0]
                                    }
                                    // Half the endpoint's slots free: claim more now rather than at the next look (once per
                                    // half, not per delivery: each claim is a write).
                                    if left == policy.concurrency / 2 { self.service.webhookWakeup.signal() }
                                }
                            }
                        }
                    } catch {
                        self.logger.warning("webhook deliveries could not be read; will try again", metadata: ["error": "\(error)"])
                    }
                    if ContinuousClock.now >= nextGauges {
                        nextGauges = ContinuousClock.now + .seconds(5)
                        await worker.recordGauges()
                    }
                    if ContinuousClock.now >= nextTrim {
                        nextTrim = ContinuousClock.now + .seconds(3600)
                        await self.trim()
                    }
                    if !more { await self.service.webhookWakeup.wait(upTo: wait) }
                }
            }
        }
        await service.webhookSender.shutdown()
    }

    /// Events past their retention (never one an endpoint has not been given), delivery attempts past seven days.
    private func trim() async {
        let now = service.clock.nowMs
        do {
            try await service.store.trimDeliveryLog(beforeMs: now - 7 * 86_400_000)
            guard let keep = service.configuration.eventRetentionMs else { return }
            let dropped = try await service.store.trimEvents(beforeMs: now - keep)
            if dropped > 0 { logger.info("events past their retention dropped", metadata: ["events": "\(dropped)"]) }
        } catch {
            logger.warning("events or delivery attempts past their retention could not be dropped", metadata: ["error": "\(error)"])
        }
    }
}
