//! The demo "orders service": a business table and the outbox events it writes with it.
//!
//! Policy: each step changes `public.demo_orders` and enqueues its event into Revenant's own
//! `outbox` in ONE transaction, exactly as docs/OUTBOX.md asks of a real service, so the
//! order exists iff its event does. The table lives in the `public` schema of Revenant's
//! database, apart from Revenant's own tables in `revenant`, as a service's table would.
//! A small share of events is deliberately wrong (a renamed field, a body that is not JSON,
//! a routing key nothing is bound to) so every failure path of the console has traffic.

use rand::Rng;
use sqlx::PgPool;
use uuid::Uuid;

use super::{DemoError, topology::Names};
use engine::outbox::store::{self, NewEvent};

/// Schema-qualified: every Revenant connection puts `revenant` first on its search_path.
pub const TABLE: &str = "public.demo_orders";

/// Creates the demo table if it is not there yet.
pub async fn ensure_table(pool: &PgPool) -> Result<(), DemoError> {
    // Runtime-checked: DDL of the demo service's own table, which is not in the migrations.
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS public.demo_orders (
             id           bigserial PRIMARY KEY,
             customer     text NOT NULL,
             amount_cents bigint NOT NULL CHECK (amount_cents > 0),
             status       text NOT NULL CHECK (status IN ('created', 'paid', 'shipped', 'refunded')),
             created_at   timestamptz NOT NULL DEFAULT now(),
             updated_at   timestamptz NOT NULL DEFAULT now()
         )",
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// What happens to an order in one tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Create,
    Pay,
    Ship,
    /// Published to `order.refunded`, which nothing binds: the broker returns it.
    Refund,
}

impl Step {
    fn status(self) -> &'static str {
        match self {
            Self::Create => "created",
            Self::Pay => "paid",
            Self::Ship => "shipped",
            Self::Refund => "refunded",
        }
    }

    /// The status an order must have for this step to apply to it.
    fn applies_to(self) -> Option<&'static str> {
        match self {
            Self::Create => None,
            Self::Pay => Some("created"),
            Self::Ship => Some("paid"),
            Self::Refund => Some("shipped"),
        }
    }

    pub fn routing_key(self) -> String {
        format!("order.{}", self.status())
    }

    fn event_type(self) -> &'static str {
        match self {
            Self::Create => "OrderCreated",
            Self::Pay => "OrderPaid",
            Self::Ship => "OrderShipped",
            Self::Refund => "OrderRefunded",
        }
    }
}

/// How the event's body is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Valid,
    /// A "v2" producer renamed `orderId` to `order_id`: consumers cannot find the order.
    RenamedField,
    /// Text, or compressed bytes someone forgot to decompress, where JSON was expected.
    NotJson,
}

/// One tick's worth of business, decided up front so a test can choose it.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub step: Step,
    pub shape: Shape,
    pub event_id: Uuid,
    pub customer: String,
    pub amount_cents: i64,
    pub tenant: String,
}

const CUSTOMERS: &[&str] = &["ada@example.com", "grace@example.com", "alan@example.com", "edsger@example.com"];
const TENANTS: &[&str] = &["acme", "globex", "initech"];

impl Plan {
    pub fn new(step: Step, shape: Shape) -> Self {
        Self {
            step,
            shape,
            event_id: Uuid::now_v7(),
            customer: CUSTOMERS[0].into(),
            amount_cents: 4_200,
            tenant: TENANTS[0].into(),
        }
    }

    /// The demo's mix: mostly new and paid orders, some shipments, a few refunds; 4 % of
    /// bodies with the renamed field and 3 % not JSON.
    pub fn random(rng: &mut impl Rng) -> Self {
        let step = match rng.random_range(0..100) {
            0..50 => Step::Create,
            50..80 => Step::Pay,
            80..97 => Step::Ship,
            _ => Step::Refund,
        };
        let shape = match rng.random_range(0..100) {
            0..4 => Shape::RenamedField,
            4..7 => Shape::NotJson,
            _ => Shape::Valid,
        };
        Self {
            step,
            shape,
            event_id: Uuid::now_v7(),
            customer: CUSTOMERS[rng.random_range(0..CUSTOMERS.len())].into(),
            amount_cents: rng.random_range(500..50_000),
            tenant: TENANTS[rng.random_range(0..TENANTS.len())].into(),
        }
    }
}

/// What a tick wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub order_id: i64,
    /// The step actually taken: a step with no order to apply to creates one instead.
    pub step: Step,
    pub event_id: Uuid,
}

/// The body and content type of an event about `order_id`.
pub fn body(shape: Shape, step: Step, order_id: i64, customer: &str, amount_cents: i64) -> (Vec<u8>, &'static str) {
    let id_field = if shape == Shape::RenamedField { "order_id" } else { "orderId" };
    match shape {
        Shape::Valid | Shape::RenamedField => {
            let mut doc = serde_json::json!({
                "customer": customer,
                "amountCents": amount_cents,
                "currency": "EUR",
                "status": step.status(),
                "at": chrono::Utc::now().to_rfc3339(),
            });
            if let Some(o) = doc.as_object_mut() {
                o.insert(id_field.into(), order_id.into());
            }
            (doc.to_string().into_bytes(), "application/json")
        }
        // Two realistic ways to get "not JSON": a plain-text body, and gzip magic bytes sent
        // with a JSON content type (shown as hex by the console).
        Shape::NotJson if order_id % 2 == 0 => {
            (format!("order {order_id} {} by {customer}", step.status()).into_bytes(), "text/plain")
        }
        Shape::NotJson => {
            let mut b = vec![0x1f, 0x8b, 0x08, 0x00];
            b.extend_from_slice(&order_id.to_be_bytes());
            (b, "application/json")
        }
    }
}

fn traceparent() -> String {
    let trace = Uuid::new_v4().simple().to_string();
    let span = &Uuid::new_v4().simple().to_string()[..16];
    format!("00-{trace}-{span}-01")
}

/// Applies one step and enqueues its event in the same transaction: both or neither.
pub async fn write(pool: &PgPool, names: &Names, plan: &Plan) -> Result<Written, DemoError> {
    let mut tx = pool.begin().await?;
    let mut step = plan.step;
    let mut order = None;
    if let Some(from) = step.applies_to() {
        // SKIP LOCKED: two demo producers never advance the same order.
        // Runtime-checked: the demo service's own table, not in Revenant's migrations.
        order = sqlx::query_as::<_, (i64, String, i64)>(
            "UPDATE public.demo_orders SET status = $2, updated_at = now()
              WHERE id = (SELECT id FROM public.demo_orders WHERE status = $1
                          ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
              RETURNING id, customer, amount_cents",
        )
        .bind(from)
        .bind(step.status())
        .fetch_optional(&mut *tx)
        .await?;
    }
    let (order_id, customer, amount) = match order {
        Some(o) => o,
        None => {
            step = Step::Create;
            // Runtime-checked: the demo service's own table, not in Revenant's migrations.
            sqlx::query_as(
                "INSERT INTO public.demo_orders (customer, amount_cents, status) VALUES ($1, $2, 'created')
                 RETURNING id, customer, amount_cents",
            )
            .bind(&plan.customer)
            .bind(plan.amount_cents)
            .fetch_one(&mut *tx)
            .await?
        }
    };
    let (payload, content_type) = body(plan.shape, step, order_id, &customer, amount);
    let schema = if plan.shape == Shape::RenamedField { 2 } else { 1 };
    let headers = serde_json::json!({
        "x-tenant": plan.tenant,
        "traceparent": traceparent(),
        "x-schema-version": schema,
        // The aggregate: the demo's commit-stream relay keeps each order's events in order.
        "x-order-id": order_id.to_string(),
    });
    let event = NewEvent::new(step.event_type(), names.exchange(), step.routing_key(), payload)
        .with_event_id(plan.event_id)
        .with_content_type(content_type)
        .with_headers(headers);
    store::enqueue(&mut *tx, &event).await?;
    tx.commit().await?;
    tracing::debug!(order_id, event_id = %plan.event_id, routing_key = %step.routing_key(), "demo order written");
    Ok(Written { order_id, step, event_id: plan.event_id })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_renamed_field_body_has_order_id_but_no_order_id_camel_case() {
        let (b, ct) = body(Shape::RenamedField, Step::Pay, 7, "a@b", 100);
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(ct, "application/json");
        assert_eq!(v["order_id"], 7);
        assert!(v.get("orderId").is_none());
    }

    #[test]
    fn not_json_bodies_do_not_parse_as_json() {
        for id in [1, 2] {
            let (b, _) = body(Shape::NotJson, Step::Create, id, "a@b", 100);
            assert!(serde_json::from_slice::<serde_json::Value>(&b).is_err(), "order {id}");
        }
    }

    #[test]
    fn the_random_mix_is_mostly_valid_and_has_every_failure() {
        use rand::{SeedableRng, rngs::StdRng};
        let mut rng = StdRng::seed_from_u64(9);
        let plans: Vec<Plan> = (0..2_000).map(|_| Plan::random(&mut rng)).collect();
        let valid = plans.iter().filter(|p| p.shape == Shape::Valid).count();
        assert!(valid > 1_700 && valid < 1_950, "{valid}");
        assert!(plans.iter().any(|p| p.shape == Shape::RenamedField));
        assert!(plans.iter().any(|p| p.shape == Shape::NotJson));
        assert!(plans.iter().any(|p| p.step == Step::Refund));
    }
}
